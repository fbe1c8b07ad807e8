-- Explain every row still older than the cutoff by the state of its object:
-- pending / in_flight (backlog), dead (with a reason), done (should be gone),
-- or none at all (unexplained). An object with derivatives is in the state of the
-- resource its row waits on: a confirmed object whose derivative is pending is
-- backlog, one whose derivative is dead is dead (dead before pending, then in flight).
-- Read-only; one pass over the eligible rows, and for rows whose object operation is
-- done (few: their rows should be gone) one probe of operations_object_resource.
SELECT coalesce(waiting.state, o.state, 'unexplained') AS state,
       count(*) AS n,
       min(eligible.ts) AS oldest
FROM (
    SELECT {ts} AS ts, {operation_key_expr} AS op_key
    FROM {table}
    WHERE {ts} < %(cutoff)s
) AS eligible
LEFT JOIN retention.operations AS o ON o.operation_key = eligible.op_key
LEFT JOIN LATERAL (
    SELECT d.state
    FROM retention.operations AS d
    WHERE o.state = 'done' AND d.parent_key = o.operation_key AND d.state <> 'done'
    ORDER BY d.state = 'dead' DESC, d.state = 'pending' DESC
    LIMIT 1
) AS waiting ON true
GROUP BY 1
