-- An erasure's remote operations: the objects deleted since it was requested (done;
-- a row goes with its object, so a derivative's operation is not named again; the rows
-- deleted are counted as each finish commits, erasure_tally_operations.sql); how
-- many operations (objects and derivatives) are still pending or in flight, whatever
-- their priority (a routine operation another worker had in flight when the erasure
-- came is the erasure's work too: the pass waits for it instead of calling its row
-- left behind); how many went dead since (held ones are counted with the rows they
-- keep: erasure_scope_rows.sql). Matched by the scope's column of the ledger (tenant,
-- row_key or object_id; {scope_filter}). Read-only.
SELECT coalesce(jsonb_agg(object_id ORDER BY object_id)
                    FILTER (WHERE state = 'done' AND parent_key IS NULL
                              AND updated_at >= %(requested_at)s),
                '[]'::jsonb) AS objects,
       count(*) FILTER (WHERE state IN ('pending', 'in_flight')) AS unfinished,
       count(*) FILTER (WHERE state = 'dead' AND updated_at >= %(requested_at)s) AS dead
FROM retention.operations
WHERE policy = %(policy)s
  AND {scope_filter}
