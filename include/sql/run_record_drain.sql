-- Append what one drain_operations pass of a run did (its worker figures, or its
-- error) to the run's list of passes. Touches one row of retention.runs.
UPDATE retention.runs
SET drain = coalesce(drain, jsonb_build_array()) || jsonb_build_array(%(drain)s::jsonb)
WHERE policy = %(policy)s AND run_id = %(run_id)s
