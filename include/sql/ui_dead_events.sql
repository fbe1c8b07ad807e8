-- The Retention view: dead retention.deleted events of the policies a user may
-- read, newest first, filtered like the dead operations. Read-only (the
-- retention.dead_events view).
SELECT event_id, policy, operation_key, event_type, attempts, last_status_code, last_error,
       failure_class, dead_since
FROM retention.dead_events
WHERE policy = ANY(%(policies)s::text[])
  AND (%(policy)s::text IS NULL OR policy = %(policy)s::text)
  AND (%(failure_class)s::text IS NULL OR failure_class = %(failure_class)s::text)
  AND (%(since)s::timestamptz IS NULL OR dead_since >= %(since)s::timestamptz)
ORDER BY dead_since DESC, event_id
LIMIT %(limit)s
