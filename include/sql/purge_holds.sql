-- Purge one bounded batch of holds lifted before the audit horizon. An active hold
-- is never purged, whatever its age; an every-policy hold (policy NULL) goes with
-- any policy's purge once lifted past that policy's horizon. Locks at most
-- batch_rows rows of retention.holds.
WITH doomed AS (
    SELECT h.hold_id FROM retention.holds AS h
    WHERE h.lifted_at IS NOT NULL AND h.lifted_at < %(horizon)s
      AND (h.policy IS NULL OR h.policy = %(policy)s)
    ORDER BY h.lifted_at
    LIMIT %(batch_rows)s
)
DELETE FROM retention.holds WHERE hold_id IN (SELECT hold_id FROM doomed)
