-- The row deleter's probe before each sub-batch, in one round trip: the next
-- sub-batch's upper key (target_batch_bound.sql, composed in) and whether an active
-- hold could keep a row of the policy's table (hold_row_possible.sql, composed in).
-- Read-only. It runs in the batch's own transaction, just before the delete, which
-- carries the held-row predicate only when holds_possible is TRUE (or the policy has a
-- hold_column): a hold committed after this statement's snapshot (taken when it
-- starts) is seen from the next batch, even when the delete's newer snapshot sees it.
SELECT batch.upto, batch.keys, {holds} AS holds_possible
FROM ({bound}) AS batch
