-- Purge one bounded batch of a policy's deletion evidence older than its audit
-- window: done operations confirmed before the horizon, with their attempts and
-- their outbox events, in one statement (one short transaction).
-- Pending, in-flight and dead operations are live work and are never purged.
-- Locks at most batch_rows operation rows and their attempt and event rows.
WITH doomed AS (
    SELECT operation_key
    FROM retention.operations
    WHERE policy = %(policy)s AND state = 'done' AND done_at < %(horizon)s
    ORDER BY done_at
    LIMIT %(batch_rows)s
    FOR UPDATE SKIP LOCKED
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
