-- Claim one alert of a run before sending it; a row comes back only to the caller
-- that may send. A new alert is claimed by inserting it; an existing one only when
-- its last send failed, or when its claim is older than the given seconds (the
-- claimer died between claim and answer). A sent alert is never claimed again.
-- Touches one row of retention.alerts (row lock on conflict).
INSERT INTO retention.alerts AS a (policy, run_id, kind, conn_id, message)
VALUES (%(policy)s, %(run_id)s, %(kind)s, %(conn_id)s, %(message)s)
ON CONFLICT (policy, run_id, kind) DO UPDATE
SET status = 'claimed',
    attempts = a.attempts + 1,
    claimed_at = now(),
    conn_id = EXCLUDED.conn_id,
    message = EXCLUDED.message,
    error = NULL
WHERE a.status = 'failed'
   OR (a.status = 'claimed' AND a.claimed_at < now() - make_interval(secs => %(stale_seconds)s))
RETURNING attempts
