-- Record what the receiver answered to a claimed alert (sent on a 2xx, failed
-- otherwise). Touches one row of retention.alerts.
UPDATE retention.alerts
SET status = %(status)s,
    status_code = %(status_code)s,
    error = %(error)s,
    sent_at = CASE WHEN %(status)s = 'sent' THEN now() ELSE sent_at END
WHERE policy = %(policy)s AND run_id = %(run_id)s AND kind = %(kind)s
