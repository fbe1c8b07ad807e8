-- Record (or move on) the evidence of one partition's detach and drop.
-- Touches one row of retention.partition_drops.
INSERT INTO retention.partition_drops AS d (
    policy, run_id, partition_name, bounds, estimated_rows, action, state
) VALUES (
    %(policy)s, %(run_id)s, %(partition_name)s, %(bounds)s, %(estimated_rows)s, %(action)s,
    %(state)s
)
ON CONFLICT (policy, run_id, partition_name) DO UPDATE
SET state = excluded.state,
    finished_at = CASE WHEN excluded.state = 'started' THEN NULL ELSE now() END
