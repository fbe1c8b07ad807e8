-- Dead operations awaiting review, newest first (the retention.dead_operations view),
-- with the resource each deletes (the object itself, or a derivative). Read-only.
SELECT operation_key, policy, tenant, object_id, row_key, failure_class, last_status_code,
       reason, attempt_count, dead_since, resource
FROM retention.dead_operations
WHERE (%(policy)s::text IS NULL OR policy = %(policy)s::text)
  AND (%(failure_class)s::text IS NULL OR failure_class = %(failure_class)s::text)
ORDER BY dead_since DESC
LIMIT %(limit)s
