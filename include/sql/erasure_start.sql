-- An erasure's pass begins: requested (or running, a pass again) becomes running.
-- A finished erasure is left alone (no row back). Touches one row of retention.erasures.
UPDATE retention.erasures
SET state = 'running', started_at = coalesce(started_at, now()), updated_at = now()
WHERE erasure_id = %(erasure_id)s AND state IN ('requested', 'running')
RETURNING *
