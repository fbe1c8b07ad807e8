-- Explain every row still older than the cutoff by the state of its operation:
-- pending / in_flight (backlog), dead (with a reason), discarded (dead, and a
-- person recorded in retention.discards that it will not be replayed), done
-- (should be gone), or none at all (unexplained); a row or object a legal hold keeps
-- is held, whatever its operation's state (binds hold_policy). Read-only; one pass
-- over the eligible rows.
SELECT CASE WHEN eligible.held THEN 'held'
            WHEN o.state = 'dead' AND EXISTS (
                SELECT 1 FROM retention.discards AS d
                WHERE d.operation_key = o.operation_key AND d.dead_since = o.updated_at)
            THEN 'discarded'
            ELSE coalesce(o.state, 'unexplained') END AS state,
       count(*) AS n,
       min(eligible.ts) AS oldest
FROM (
    SELECT {ts} AS ts, {operation_key_expr} AS op_key, {held} AS held
    FROM {table}
    WHERE {ts} < %(cutoff)s
) AS eligible
LEFT JOIN retention.operations AS o ON o.operation_key = eligible.op_key
GROUP BY 1
