-- One table of explain_family_rows.sql (not a statement of its own): a column of at
-- most cap rows of a table that descend from one row key of a policy with children:
-- the policy's own row by its key, or a listed child's rows whose foreign key holds a
-- value the level above returned (no index is assumed: each level is bounded by
-- statement_ms and the cap, a 1000-row limit).
SELECT {column} FROM {table} WHERE {match} IN ({above}) LIMIT %(cap)s
