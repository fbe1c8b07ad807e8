-- Leased queue: hand claimed-but-unstarted jobs back as pending, due as before,
-- spending no attempt (time budget spent, task stopping). Only the lease owner
-- can release. Touches the named rows.
UPDATE {table}
SET state = 'pending', lease_owner = NULL, lease_expires_at = NULL, updated_at = now()
WHERE {id} = ANY(%(ids)s) AND lease_owner = %(owner)s AND state = 'in_flight'
RETURNING {id} AS job_id
