-- Move one partition's record on: 'detached', 'dropped', 'not_detached' or
-- 'abandoned', with the reason when there is one. resolved_by_run names the run
-- whose finishing pass closed it (NULL when the record's own run moves it on).
-- Touches one row of retention.partition_drops.
UPDATE retention.partition_drops
SET state = %(state)s,
    reason = coalesce(%(reason)s, reason),
    resolved_by_run = coalesce(%(resolved_by_run)s, resolved_by_run),
    finished_at = now()
WHERE policy = %(policy)s AND run_id = %(run_id)s AND partition_name = %(partition_name)s
