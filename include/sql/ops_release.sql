-- Give claimed-but-unstarted operations back (time budget spent, task stopping):
-- pending again, no attempt spent. Only the current lease owner can release.
UPDATE retention.operations
SET state = 'pending', lease_owner = NULL, lease_expires_at = NULL, updated_at = now()
WHERE operation_key = ANY(%(keys)s) AND lease_owner = %(owner)s AND state = 'in_flight'
