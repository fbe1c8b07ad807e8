-- The failure classes that dead operations have, with how many of each, optionally
-- of one policy (for `dead-letters --failure-class` with no class, or one that
-- matches nothing). Read-only; served by the operations_dead partial index.
SELECT failure_class, count(*) AS operations, max(updated_at) AS newest
FROM retention.operations
WHERE state = 'dead'
  AND (%(policy)s::text IS NULL OR policy = %(policy)s::text)
GROUP BY failure_class
ORDER BY count(*) DESC, failure_class
