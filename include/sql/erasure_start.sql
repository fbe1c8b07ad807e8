-- An erasure's pass begins: requested (or running, a pass again) becomes running, and
-- the pass is counted (passes; NULL stays NULL: an erasure recorded before passes were
-- counted). A finished erasure is left alone (no row back). Touches one row of
-- retention.erasures.
UPDATE retention.erasures
SET state = 'running', started_at = coalesce(started_at, now()), passes = passes + 1,
    updated_at = now()
WHERE erasure_id = %(erasure_id)s AND state IN ('requested', 'running')
RETURNING *
