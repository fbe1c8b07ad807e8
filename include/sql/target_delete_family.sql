-- Delete one sub-batch of a window together with its listed children, in one statement:
-- the eligible rows in the key range (after, upto], as target_delete_batch.sql deletes
-- them, and, through data-modifying CTEs (target_delete_family_child.sql, one a child),
-- the rows of each child table that reference them, level by level: a child's delete
-- takes the keys its parent's delete returned. One statement, so a foreign key's check
-- (run when the statement ends) never sees a parent gone before its children, and a row
-- updated to a newer timestamp while we waited for its lock is re-checked and kept with
-- its children. A held row (as in target_delete_batch.sql) is kept, and so are its
-- children, which go only by the keys this delete returns. Returns the rows deleted in
-- each table (the caller names the columns).
-- Runs in the batch's own transaction with lock_timeout and statement_timeout set.
WITH gone AS (
    DELETE FROM {table}
    WHERE {key} > %(after)s
      AND {key} <= %(upto)s
      AND {ts} < %(cutoff)s
      AND {tenant_filter}
      AND NOT {held}
    RETURNING {returning}
){children}
SELECT {counts}
