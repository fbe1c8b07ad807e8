-- Purge one bounded batch of a policy's replay audit rows older than the audit
-- horizon. Locks at most batch_rows rows of retention.replays.
WITH doomed AS (
    SELECT replay_id FROM retention.replays
    WHERE policy = %(policy)s AND replayed_at < %(horizon)s
    ORDER BY replayed_at
    LIMIT %(batch_rows)s
)
DELETE FROM retention.replays WHERE replay_id IN (SELECT replay_id FROM doomed)
