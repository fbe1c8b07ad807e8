-- The Retention view: dead operations of the policies a user may read, newest
-- first, filtered by policy, failure class and the time they went dead; either
-- those awaiting review (discarded false, the default list) or those reviewed and
-- discarded (retention.discards: who, when, the note). Read-only (the
-- retention.dead_operations view; index operations_dead, discards_operation).
SELECT o.operation_key, o.policy, o.tenant, o.object_id, o.row_key, o.failure_class,
       o.last_status_code, o.reason, o.attempt_count, o.dead_since,
       d.discarded_by, d.discarded_at, d.note AS discard_note
FROM retention.dead_operations AS o
LEFT JOIN LATERAL (
    SELECT discarded_by, discarded_at, note FROM retention.discards AS d
    WHERE d.operation_key = o.operation_key AND d.dead_since = o.dead_since
    ORDER BY d.discarded_at LIMIT 1
) AS d ON true
WHERE o.policy = ANY(%(policies)s::text[])
  AND (%(policy)s::text IS NULL OR o.policy = %(policy)s::text)
  AND (%(failure_class)s::text IS NULL OR o.failure_class = %(failure_class)s::text)
  AND (%(since)s::timestamptz IS NULL OR o.dead_since >= %(since)s::timestamptz)
  AND (d.discarded_by IS NOT NULL) = %(discarded)s::boolean
ORDER BY o.dead_since DESC, o.operation_key
LIMIT %(limit)s
