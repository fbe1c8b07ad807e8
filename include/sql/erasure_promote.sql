-- Every pending operation of an erasure's scope becomes urgent and due now, whatever
-- row version it was made for (erasure_enqueue.sql promotes those of the rows as they
-- are now; an older version's operation, waiting out a backoff, would otherwise keep
-- the erasure running until the routine drain reached it). Matched by the scope's
-- column of the ledger ({scope_filter}). Updates rows of retention.operations.
UPDATE retention.operations
SET priority = 'urgent', not_before = least(not_before, now()), updated_at = now()
WHERE policy = %(policy)s
  AND state = 'pending'
  AND priority <> 'urgent'
  AND {scope_filter}
