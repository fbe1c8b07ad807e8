-- A pass over an open erasure failed with an error that may pass (a lock, a timeout, a
-- connection that dropped): the error is recorded and the erasure stays open for the
-- next pass (the late alert tells its deadline). A finished erasure is left alone
-- (no row back). Touches one row of retention.erasures.
UPDATE retention.erasures
SET error = %(error)s, updated_at = now()
WHERE erasure_id = %(erasure_id)s AND state IN ('requested', 'running')
RETURNING *
