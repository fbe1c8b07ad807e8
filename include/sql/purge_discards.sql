-- Purge one bounded batch of a policy's discard records older than the audit
-- horizon that no longer explain anything: their operation is gone, or is no longer
-- in the dead episode they discarded (a replay moved it on). A discard of an
-- operation still dead in that episode is kept however old: it is what explains
-- it. Locks at most batch_rows rows of retention.discards.
WITH doomed AS (
    SELECT d.discard_id FROM retention.discards AS d
    WHERE d.policy = %(policy)s AND d.discarded_at < %(horizon)s
      AND NOT EXISTS (SELECT 1 FROM retention.operations AS o
                      WHERE o.operation_key = d.operation_key AND o.state = 'dead'
                        AND o.updated_at = d.dead_since)
    ORDER BY d.discarded_at
    LIMIT %(batch_rows)s
)
DELETE FROM retention.discards WHERE discard_id IN (SELECT discard_id FROM doomed)
