-- What would stop a partition from being detached and dropped, or make dropping it
-- differ from deleting its rows: views (and materialized views, rules) that read it,
-- foreign keys that reference it (also those inherited from a key on the parent:
-- the row path lets the key act, ON DELETE CASCADE or an error), and publications
-- that carry it or a table it is a partition of (a DROP is not replicated, row
-- deletes are). One row per finding, in words. Reads the catalog only.
SELECT DISTINCT 'view ' || format('%%I.%%I', vn.nspname, v.relname) AS found
FROM pg_depend AS d
JOIN pg_rewrite AS r ON d.classid = 'pg_rewrite'::regclass AND d.objid = r.oid
JOIN pg_class AS v ON v.oid = r.ev_class
JOIN pg_namespace AS vn ON vn.oid = v.relnamespace
WHERE d.refclassid = 'pg_class'::regclass AND d.refobjid = %(oid)s::oid
  AND r.ev_class <> %(oid)s::oid
UNION ALL
SELECT DISTINCT 'foreign key ' || format('%%I', coalesce(top.conname, c.conname)) || ' of '
       || format('%%I.%%I', fn.nspname, f.relname)
FROM pg_constraint AS c
LEFT JOIN pg_constraint AS top ON top.oid = c.conparentid  -- the key as declared on the parent
JOIN pg_class AS f ON f.oid = coalesce(top.conrelid, c.conrelid)
JOIN pg_namespace AS fn ON fn.oid = f.relnamespace
WHERE c.contype = 'f' AND c.confrelid = %(oid)s::oid
UNION ALL
SELECT DISTINCT 'publication ' || format('%%I', p.pubname)
FROM pg_publication_tables AS p
JOIN pg_partition_ancestors(%(oid)s::oid) AS a
  ON to_regclass(format('%%I.%%I', p.schemaname, p.tablename)) = a.relid
ORDER BY 1
