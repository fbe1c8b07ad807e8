-- The Retention view: which of the chosen event ids are dead events, and of which
-- policy, so that a replay (kind events) is started per policy for exactly
-- these. Read-only.
SELECT policy, array_agg(event_id ORDER BY event_id) AS event_ids
FROM retention.dead_events
WHERE event_id = ANY(%(ids)s::text[]) AND policy = ANY(%(policies)s::text[])
GROUP BY policy
ORDER BY policy
