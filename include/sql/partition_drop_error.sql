-- A detached partition could not be dropped: keep its state ('detached'), note the
-- error and count the attempt. Reconcile names it until a later pass drops it.
-- Touches one row of retention.partition_drops.
UPDATE retention.partition_drops
SET last_error = %(error)s,
    drop_attempts = drop_attempts + 1
WHERE policy = %(policy)s AND run_id = %(run_id)s AND partition_name = %(partition_name)s
