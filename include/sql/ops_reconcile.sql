-- Explain every row still older than the cutoff by the state of its object:
-- pending / in_flight (backlog), dead (with a reason), discarded (dead, and a
-- person recorded in retention.discards that it will not be replayed), done
-- (should be gone), or none at all (unexplained); a row or object a legal hold keeps
-- is held, whatever its operation's state (binds hold_policy). An object with
-- derivatives (%(derivatives)s) is in the state of the resource that keeps its row
-- longest, the object itself or any derivative, whatever the object's own state:
-- dead first (nobody will finish it: a pending object with a dead derivative is
-- dead, not backlog), a dead one not discarded before a discarded one (so a
-- discarded resource never hides one still to review), then pending, then in
-- flight; done only when all are. Read-only; one pass over the eligible rows, and
-- for a policy with derivatives one probe of operations_object_resource per row.
SELECT CASE WHEN eligible.held THEN 'held'
            WHEN blocking.discarded THEN 'discarded'
            ELSE coalesce(blocking.state, 'unexplained') END AS state,
       count(*) AS n,
       min(eligible.ts) AS oldest
FROM (
    SELECT {ts} AS ts, {operation_key_expr} AS op_key, {held} AS held
    FROM {table}
    WHERE {ts} < %(cutoff)s
) AS eligible
LEFT JOIN retention.operations AS o ON o.operation_key = eligible.op_key
-- the operation that explains the row: of the object's resources, the one it waits on
LEFT JOIN LATERAL (
    SELECT r.state,
           r.state = 'dead' AND EXISTS (
               SELECT 1 FROM retention.discards AS x
               WHERE x.operation_key = r.operation_key
                 AND x.dead_since = r.updated_at) AS discarded
    FROM (
        SELECT o.state, o.operation_key, o.updated_at
        UNION ALL
        SELECT d.state, d.operation_key, d.updated_at
        FROM retention.operations AS d
        WHERE %(derivatives)s AND d.parent_key = o.operation_key
    ) AS r
    ORDER BY r.state = 'dead' DESC, discarded ASC, r.state = 'pending' DESC,
             r.state = 'in_flight' DESC, r.state = 'done' ASC
    LIMIT 1
) AS blocking ON o.operation_key IS NOT NULL
GROUP BY 1
