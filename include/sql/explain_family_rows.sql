-- How many rows of one table of a policy's family are still there for one row key
-- (explain): the rows are explain_family_level.sql for that table, each level limited
-- to cap rows, so a large family is counted only up to that, never scanned. Read-only;
-- the caller bounds it with statement_timeout and lock_timeout too.
SELECT count(*) AS row_count FROM ({rows}) AS present
