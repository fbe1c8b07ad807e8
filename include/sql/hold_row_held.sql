-- A fragment, not a statement: TRUE when the current row of the policy's table is
-- held, by an active hold of this policy or of every policy on its row key, tenant
-- or object id, or by its hold_column (true, or any value but false and NULL).
-- Embedded in the WHERE of delete statements as NOT (...), so a hold placed while
-- a window runs applies from the next statement; the parent-key selection carries
-- it, so rows deleted by parent key follow. Never NULL. Each IN is a hashed subplan
-- over the active holds (a handful), read once per statement. A tenant or object hold
-- is read through its column's type ({tenant_held_value}, {object_held_value}:
-- retention.hold_value_as, migration 0026), as an every-policy hold is stored as given.
-- Binds %(hold_policy)s.
({key}::text IN (SELECT h.value FROM retention.holds AS h
                 WHERE h.lifted_at IS NULL AND h.match = 'key'
                   AND (h.policy IS NULL OR h.policy = %(hold_policy)s))
 OR coalesce({tenant_text} IN (SELECT {tenant_held_value} FROM retention.holds AS h
                               WHERE h.lifted_at IS NULL AND h.match = 'tenant'
                                 AND (h.policy IS NULL OR h.policy = %(hold_policy)s)), FALSE)
 OR coalesce({object_text} IN (SELECT {object_held_value} FROM retention.holds AS h
                               WHERE h.lifted_at IS NULL AND h.match = 'object'
                                 AND (h.policy IS NULL OR h.policy = %(hold_policy)s)), FALSE)
 OR coalesce(to_jsonb({hold_value}) NOT IN ('false'::jsonb, 'null'::jsonb), FALSE))
