-- A fragment, not a statement: TRUE when an active hold of this policy or of every
-- policy could keep a row of its table, i.e. one of a match the held-row predicate
-- (hold_row_held.sql) asks of that table: a row key always, a tenant when the table has
-- a tenant column, an object id when its statement compares one. One probe of the
-- holds_active index. The row deleter reads it in each batch's transaction and leaves
-- the held-row predicate out of that batch's delete when it is FALSE and the policy has
-- no hold_column. Binds %(hold_policy)s and %(hold_matches)s (text[]).
EXISTS (SELECT FROM retention.holds AS h
        WHERE h.lifted_at IS NULL
          AND h.match = ANY (%(hold_matches)s::text[])
          AND (h.policy IS NULL OR h.policy = %(hold_policy)s))
