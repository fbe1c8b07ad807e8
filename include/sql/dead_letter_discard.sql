-- Dead letters: record that chosen dead operations of the given policies were
-- reviewed and discarded (who, an optional note), one retention.discards row per
-- operation that is dead and not discarded already; returns the operations recorded.
-- Changes no operation. Locks the chosen dead operations' rows FOR SHARE, so a
-- replay of the same operations at the same moment either runs first (and they are
-- no longer dead here) or waits for this to commit. Two discards of the same
-- operation at once: the unique index (migration 0021) keeps the first.
INSERT INTO retention.discards (operation_key, policy, discarded_by, note, dead_since)
SELECT o.operation_key, o.policy, %(discarded_by)s, %(note)s, o.updated_at
FROM retention.operations AS o
WHERE o.operation_key = ANY(%(keys)s::text[])
  AND o.policy = ANY(%(policies)s::text[])
  AND o.state = 'dead'
  AND NOT EXISTS (SELECT 1 FROM retention.discards AS d
                  WHERE d.operation_key = o.operation_key AND d.dead_since = o.updated_at)
ORDER BY o.operation_key
FOR SHARE OF o
ON CONFLICT (operation_key, dead_since) DO NOTHING
RETURNING operation_key, policy, discarded_at
