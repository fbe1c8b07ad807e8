-- The Retention view: which of the chosen operation keys are dead, and of which
-- policy, so that a replay is started per policy for exactly these. Read-only.
SELECT policy, array_agg(operation_key ORDER BY operation_key) AS operation_keys
FROM retention.dead_operations
WHERE operation_key = ANY(%(keys)s::text[]) AND policy = ANY(%(policies)s::text[])
GROUP BY policy
ORDER BY policy
