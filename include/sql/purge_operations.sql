-- Purge one bounded batch of a policy's deletion evidence older than its audit
-- window: done operations confirmed before the horizon, with their attempts and
-- their outbox events, in one statement (one short transaction).
-- Pending, in-flight and dead operations are live work and are never purged, and
-- neither is a done one while another resource of its object (the object itself or
-- a derivative, remote.derivatives) is: its row still exists and waits on it.
-- Locks at most batch_rows operation rows and their attempt and event rows.
WITH doomed AS (
    SELECT o.operation_key
    FROM retention.operations AS o
    WHERE o.policy = %(policy)s AND o.state = 'done' AND o.done_at < %(horizon)s
      AND NOT EXISTS (
          SELECT 1 FROM retention.operations AS s
          WHERE s.parent_key = coalesce(o.parent_key, o.operation_key) AND s.state <> 'done')
      AND NOT EXISTS (
          SELECT 1 FROM retention.operations AS s
          WHERE s.operation_key = o.parent_key AND s.state <> 'done')
    ORDER BY o.done_at
    LIMIT %(batch_rows)s
    FOR UPDATE OF o SKIP LOCKED
), attempts AS (
    DELETE FROM retention.attempts WHERE operation_key IN (SELECT operation_key FROM doomed)
    RETURNING 1
), events AS (
    DELETE FROM retention.outbox WHERE operation_key IN (SELECT operation_key FROM doomed)
    RETURNING 1
), operations AS (
    DELETE FROM retention.operations WHERE operation_key IN (SELECT operation_key FROM doomed)
    RETURNING 1
)
SELECT (SELECT count(*) FROM operations) AS operations,
       (SELECT count(*) FROM attempts) AS attempts,
       (SELECT count(*) FROM events) AS events
