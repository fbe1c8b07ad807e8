-- Count one committed delete batch of an erasure's own pass (the row deleter over its
-- scope), inside the batch's own transaction: by_table ('schema.table' → rows, the
-- policy's table and its listed children) is added to the erasure's rows_deleted, table
-- by table, so what a pass deleted is kept even when a later batch of the same pass
-- fails. Touches one row of retention.erasures (an open one: a finished erasure's
-- counts are its receipt's).
UPDATE retention.erasures
SET rows_deleted = (SELECT coalesce(jsonb_object_agg(t.tbl, t.n), '{{}}'::jsonb)
                    FROM (SELECT coalesce(o.key, b.key) AS tbl,
                                 coalesce(o.value::bigint, 0) + coalesce(b.value::bigint, 0) AS n
                          FROM jsonb_each_text(rows_deleted) AS o
                          FULL JOIN jsonb_each_text(%(by_table)s::jsonb) AS b
                            ON b.key = o.key) AS t),
    updated_at = now()
WHERE erasure_id = %(erasure_id)s AND state IN ('requested', 'running')
