-- Move dead (exhausted) events of a policy back to pending, attempts reset,
-- and write one audit row; filters: event ids, dead since (at least one given).
-- Touches the matching rows of retention.outbox and one row of retention.replays.
WITH moved AS (
    UPDATE retention.outbox
    SET state = 'pending', attempts = 0, not_before = now(), updated_at = now()
    WHERE policy = %(policy)s
      AND state = 'dead'
      AND (%(ids)s::text[] IS NULL OR event_id = ANY(%(ids)s::text[]))
      AND (%(since)s::timestamptz IS NULL OR updated_at >= %(since)s::timestamptz)
    RETURNING event_id
)
INSERT INTO retention.replays (kind, policy, requested_by, reason, filters, operation_keys)
SELECT 'events', %(policy)s, %(requested_by)s, %(reason)s, %(filters)s,
       coalesce(array_agg(event_id ORDER BY event_id), ARRAY[]::text[])
FROM moved
RETURNING replay_id, operation_keys
