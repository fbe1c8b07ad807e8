-- When the next unfinished operation of a window becomes claimable (a pending one at
-- not_before, an in-flight one when its lease expires; null when none). Read-only.
SELECT min(CASE WHEN state = 'in_flight' THEN lease_expires_at ELSE not_before END) AS next_due,
       count(*) AS pending
FROM retention.operations
WHERE window_key = %(window_key)s AND state IN ('pending', 'in_flight')
