-- Record what a run's drain_operations pass did (its worker figures, or an error).
-- Touches one row of retention.runs.
UPDATE retention.runs SET drain = %(drain)s
WHERE policy = %(policy)s AND run_id = %(run_id)s
