-- An erasure's remote operations since it was requested: the objects deleted (done),
-- how many are still pending, in flight or dead, and the objects whose operations a
-- hold keeps (state 'held', once legal holds exist: issue 20 part 1). Matched by the scope's column of
-- the ledger (tenant, row_key or object_id; {scope_filter}). Read-only.
SELECT coalesce(jsonb_agg(object_id ORDER BY object_id) FILTER (WHERE state = 'done'),
                '[]'::jsonb) AS objects,
       count(*) FILTER (WHERE state = 'done') AS done,
       count(*) FILTER (WHERE state IN ('pending', 'in_flight')) AS unfinished,
       count(*) FILTER (WHERE state = 'dead') AS dead,
       coalesce(jsonb_agg(object_id ORDER BY object_id) FILTER (WHERE state = 'held'),
                '[]'::jsonb) AS held_objects
FROM retention.operations
WHERE policy = %(policy)s
  AND priority = 'urgent'
  AND updated_at >= %(requested_at)s
  AND {scope_filter}
