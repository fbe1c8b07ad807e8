-- What a recorded partition is now: the oid its name resolves to (NULL: no table
-- has the name), whether the recorded oid still exists, that table's name now,
-- whether it is a partition and of which table, whether that table is the
-- policy's, and whether a DETACH … CONCURRENTLY of it is pending. Without a
-- recorded oid (records older than migration 0012) the table the name resolves
-- to stands in for it. Reads the catalog only.
SELECT r.name_oid,
       c.oid IS NOT NULL AS oid_exists,
       CASE WHEN c.oid IS NOT NULL THEN format('%%I.%%I', n.nspname, c.relname) END AS oid_name,
       coalesce(c.relispartition, false) AS is_partition,
       (SELECT format('%%I.%%I', pn.nspname, p.relname)
        FROM pg_inherits AS i
        JOIN pg_class AS p ON p.oid = i.inhparent
        JOIN pg_namespace AS pn ON pn.oid = p.relnamespace
        WHERE i.inhrelid = c.oid
        LIMIT 1) AS parent_name,
       coalesce(
           (SELECT i.inhparent FROM pg_inherits AS i WHERE i.inhrelid = c.oid LIMIT 1)
               = to_regclass(format('%%I.%%I', %(parent_schema)s::text, %(parent_table)s::text)),
           false
       ) AS attached_to_policy_table,
       coalesce(
           (SELECT i.inhdetachpending FROM pg_inherits AS i WHERE i.inhrelid = c.oid LIMIT 1),
           false
       ) AS detach_pending
FROM (
    SELECT to_regclass(format('%%I.%%I', %(schema)s::text, %(name)s::text))::oid AS name_oid
) AS r
LEFT JOIN pg_class AS c ON c.oid = coalesce(%(oid)s::oid, r.name_oid)
LEFT JOIN pg_namespace AS n ON n.oid = c.relnamespace
