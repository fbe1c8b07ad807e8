-- The Retention view: dead operations of the policies a user may read, newest
-- first, filtered by policy, failure class and the time they went dead.
-- Read-only (the retention.dead_operations view; index operations_dead).
SELECT operation_key, policy, tenant, object_id, row_key, failure_class, last_status_code,
       reason, attempt_count, dead_since
FROM retention.dead_operations
WHERE policy = ANY(%(policies)s::text[])
  AND (%(policy)s::text IS NULL OR policy = %(policy)s::text)
  AND (%(failure_class)s::text IS NULL OR failure_class = %(failure_class)s::text)
  AND (%(since)s::timestamptz IS NULL OR dead_since >= %(since)s::timestamptz)
ORDER BY dead_since DESC, operation_key
LIMIT %(limit)s
