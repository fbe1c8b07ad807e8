-- Hand claimed-but-unsent events back as pending (endpoint disabled, time up).
UPDATE retention.outbox
SET state = 'pending', lease_owner = NULL, lease_expires_at = NULL, updated_at = now()
WHERE event_id = ANY(%(ids)s) AND lease_owner = %(owner)s AND state = 'in_flight'
