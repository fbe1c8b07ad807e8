-- Forget a policy's alert ledger rows older than its audit_days. Deletes only
-- that policy's old rows of retention.alerts (through the claimed_at index).
DELETE FROM retention.alerts
WHERE policy = %(policy)s AND claimed_at < now() - make_interval(days => %(days)s)
