-- Record a delivery attempt of an event this deliverer holds: delivered,
-- pending again (with not_before), or dead. Guarded by the lease owner.
-- Touches one row of retention.outbox.
UPDATE retention.outbox
SET state = %(state)s,
    attempts = attempts + %(attempt_spent)s,
    not_before = coalesce(%(not_before)s, not_before),
    lease_owner = NULL,
    lease_expires_at = NULL,
    last_status_code = %(status)s,
    last_error = %(error)s,
    delivered_at = CASE WHEN %(state)s = 'delivered' THEN now() ELSE delivered_at END,
    updated_at = now()
WHERE event_id = %(event_id)s AND lease_owner = %(owner)s AND state = 'in_flight'
RETURNING event_id
