-- Explain every row still older than the cutoff by the state of its object:
-- pending / in_flight (backlog), dead (with a reason), discarded (dead, and a
-- person recorded in retention.discards that it will not be replayed), done
-- (should be gone), or none at all (unexplained); a row or object a legal hold keeps
-- is held, whatever its operation's state (binds hold_policy). An object with
-- derivatives is in the state of the resource its row waits on: a confirmed object
-- whose derivative is pending is backlog, one whose derivative is dead is dead (dead
-- before pending, then in flight), and discarded when that dead resource was
-- discarded. Read-only; one pass over the eligible rows, and for rows whose object
-- operation is done (few: their rows should be gone) one probe of
-- operations_object_resource.
SELECT CASE WHEN eligible.held THEN 'held'
            WHEN blocking.state = 'dead' AND EXISTS (
                SELECT 1 FROM retention.discards AS x
                WHERE x.operation_key = blocking.operation_key
                  AND x.dead_since = blocking.updated_at)
            THEN 'discarded'
            ELSE coalesce(blocking.state, 'unexplained') END AS state,
       count(*) AS n,
       min(eligible.ts) AS oldest
FROM (
    SELECT {ts} AS ts, {operation_key_expr} AS op_key, {held} AS held
    FROM {table}
    WHERE {ts} < %(cutoff)s
) AS eligible
LEFT JOIN retention.operations AS o ON o.operation_key = eligible.op_key
LEFT JOIN LATERAL (
    SELECT d.state, d.operation_key, d.updated_at
    FROM retention.operations AS d
    WHERE o.state = 'done' AND d.parent_key = o.operation_key AND d.state <> 'done'
    ORDER BY d.state = 'dead' DESC, d.state = 'pending' DESC
    LIMIT 1
) AS waiting ON true
-- the operation that explains the row: the resource it waits on, else its object's
CROSS JOIN LATERAL (
    SELECT coalesce(waiting.state, o.state) AS state,
           CASE WHEN waiting.state IS NOT NULL THEN waiting.operation_key
                ELSE o.operation_key END AS operation_key,
           CASE WHEN waiting.state IS NOT NULL THEN waiting.updated_at
                ELSE o.updated_at END AS updated_at
) AS blocking
GROUP BY 1
