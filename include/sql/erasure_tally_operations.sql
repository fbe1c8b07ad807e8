-- Count the rows one committed finish batch of remote deletions deleted (ops_finish.sql:
-- each operation's row and its listed children, by table, 'schema.table') toward
-- every open erasure (requested or running) of the policy whose scope holds the
-- operation's row: its tenant, its row key or its object id. It runs inside the
-- finish's own transaction, whichever worker finishes the operation (an erasure's urgent
-- pass, or a routine drain that got to the row first), so an erasure's counts are what
-- was deleted of its scope while it was open, committed with the deletions they count
-- (a pass that fails part-way keeps what its committed batches deleted). Locks the open
-- erasures it counts toward in erasure_id order (two finishes counting toward the same
-- erasures never wait on each other in a cycle). Updates rows of retention.erasures.
WITH batch AS (
    -- one entry per operation and table it deleted rows from (plain arrays: cheap to send)
    SELECT *
    FROM unnest(%(row_keys)s::text[], %(tenants)s::text[], %(object_ids)s::text[],
                %(table_names)s::text[], %(rows)s::bigint[])
         AS b(b_row_key, b_tenant, b_object_id, b_table, b_rows)
), counted AS (
    SELECT e.erasure_id, batch.b_table AS tbl, sum(batch.b_rows) AS n
    FROM retention.erasures AS e
    JOIN batch
      ON (e.scope = 'tenant' AND batch.b_tenant = e.value)
      OR (e.scope = 'key' AND batch.b_row_key = e.value)
      OR (e.scope = 'object' AND batch.b_object_id = e.value)
    WHERE e.policy = %(policy)s AND e.state IN ('requested', 'running')
    GROUP BY e.erasure_id, batch.b_table
), added AS (
    SELECT c.erasure_id, jsonb_object_agg(c.tbl, c.n) AS by_table
    FROM counted AS c
    GROUP BY c.erasure_id
), locked AS (
    SELECT e.erasure_id, added.by_table
    FROM retention.erasures AS e
    JOIN added ON added.erasure_id = e.erasure_id
    ORDER BY e.erasure_id
    FOR UPDATE OF e
)
UPDATE retention.erasures AS e
SET rows_deleted = (SELECT coalesce(jsonb_object_agg(t.tbl, t.n), '{{}}'::jsonb)
                    FROM (SELECT coalesce(o.key, b.key) AS tbl,
                                 coalesce(o.value::bigint, 0) + coalesce(b.value::bigint, 0) AS n
                          FROM jsonb_each_text(e.rows_deleted) AS o
                          FULL JOIN jsonb_each_text(locked.by_table) AS b
                            ON b.key = o.key) AS t),
    updated_at = now()
FROM locked
WHERE e.erasure_id = locked.erasure_id AND e.state IN ('requested', 'running')
