-- Delete one sub-batch of a window: eligible rows in the key range (after, upto].
-- The caller bounds upto with target_batch_bound.sql, so at most batch_rows rows match.
-- A key range (not a LIMIT subquery) lets Postgres delete through one index range
-- scan; row locks are taken by the DELETE itself, and a row updated to a newer
-- timestamp while we waited for its lock is re-checked and kept.
-- A held row (retention.holds, or the policy's hold_column) is kept: the hold is read
-- by this statement, so a hold placed while the window runs applies from the next
-- batch, and child rows deleted by parent key follow it.
-- Runs in its own short transaction with lock_timeout and statement_timeout set.
DELETE FROM {table}
WHERE {key} > %(after)s
  AND {key} <= %(upto)s
  AND {ts} < %(cutoff)s
  AND {tenant_filter}
  AND NOT {held}
