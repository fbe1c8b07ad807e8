-- Explain every row still older than the cutoff by the state of its operation:
-- pending / in_flight (backlog), dead (with a reason), done (should be gone),
-- or none at all (unexplained). Read-only; one pass over the eligible rows.
SELECT coalesce(o.state, 'unexplained') AS state,
       count(*) AS n,
       min(eligible.ts) AS oldest
FROM (
    SELECT {ts} AS ts, {operation_key_expr} AS op_key
    FROM {table}
    WHERE {ts} < %(cutoff)s
) AS eligible
LEFT JOIN retention.operations AS o ON o.operation_key = eligible.op_key
GROUP BY 1
