-- Operations an operator can name without the whole key: a key prefix (hex), an
-- object id, or a row key, optionally of one policy; newest first, bounded by
-- %(limit)s. Read-only. Operation keys are the primary key (a prefix is a range on
-- it); object ids and row keys are not indexed, so without a policy this reads
-- the ledger (an operator's lookup, not a task's). An object id or a row key names
-- the object's own operation, whose record lists every resource (its derivatives'
-- operations are found by their key).
SELECT operation_key, policy, table_name, row_key, object_id, tenant, version, state,
       failure_class, last_status_code, updated_at, resource
FROM retention.operations
WHERE (%(policy)s::text IS NULL OR policy = %(policy)s::text)
  AND (
        (%(prefix)s::text IS NOT NULL
         AND operation_key COLLATE "C" >= %(prefix)s::text
         AND operation_key COLLATE "C" < %(prefix)s::text || 'g')
     OR (parent_key IS NULL
         AND (object_id = %(term)s::text
              OR (%(row_key)s::bigint IS NOT NULL AND row_key = %(row_key)s::bigint)))
  )
ORDER BY updated_at DESC, operation_key
LIMIT %(limit)s
