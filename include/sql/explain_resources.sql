-- Every remote resource of one object (its own operation, then each derivative's,
-- by name): the state the object's row waits on. Read-only; the operations' primary
-- key and operations_object_resource.
SELECT operation_key, resource, parent_key IS NULL AS is_object, state, done_at,
       last_status_code, failure_class, reason, attempt_count, not_before
FROM retention.operations
WHERE operation_key = %(object_key)s
UNION ALL
SELECT operation_key, resource, parent_key IS NULL AS is_object, state, done_at,
       last_status_code, failure_class, reason, attempt_count, not_before
FROM retention.operations
WHERE parent_key = %(object_key)s
ORDER BY is_object DESC, resource
