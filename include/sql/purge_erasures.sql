-- Purge one bounded batch of a policy's finished erasures (done, blocked_by_hold,
-- failed) that finished before the audit horizon, with their receipts (the
-- retention.erased event each wrote to the outbox, delivered or not: evidence never
-- outlives its audit window, as purge_operations.sql purges its operations' events).
-- An unfinished erasure (requested, running) is never purged, whatever its age: it is
-- work still to do. One statement (one short transaction); locks at most batch_rows
-- rows of retention.erasures and their events.
WITH doomed AS (
    SELECT e.erasure_id, 'erasure:' || e.erasure_id::text AS receipt_key
    FROM retention.erasures AS e
    WHERE e.policy = %(policy)s
      AND e.state IN ('done', 'blocked_by_hold', 'failed')
      AND e.finished_at < %(horizon)s
    ORDER BY e.finished_at
    LIMIT %(batch_rows)s
    FOR UPDATE OF e SKIP LOCKED
), receipts AS (
    DELETE FROM retention.outbox
    WHERE operation_key IN (SELECT receipt_key FROM doomed)
      AND event_type = 'retention.erased'
    RETURNING 1
), erasures AS (
    DELETE FROM retention.erasures WHERE erasure_id IN (SELECT erasure_id FROM doomed)
    RETURNING 1
)
SELECT (SELECT count(*) FROM erasures) AS erasures,
       (SELECT count(*) FROM receipts) AS erasure_receipts
