-- Every foreign key constraint that references one of the named tables ('schema.table'),
-- with its referencing table and columns, the referenced columns and its ON DELETE
-- action: the coupled tables a policy must account for before it deletes anything.
-- A partition's copy of a partitioned table's constraint is left out (conparentid).
-- Reads the catalog only.
SELECT c.conname AS constraint_name,
       rn.nspname || '.' || rc.relname AS referencing_table,
       array(SELECT a.attname::text
             FROM unnest(c.conkey) WITH ORDINALITY AS k(attnum, ord)
             JOIN pg_attribute AS a ON a.attrelid = c.conrelid AND a.attnum = k.attnum
             ORDER BY k.ord) AS referencing_columns,
       fn.nspname || '.' || fc.relname AS referenced_table,
       array(SELECT a.attname::text
             FROM unnest(c.confkey) WITH ORDINALITY AS k(attnum, ord)
             JOIN pg_attribute AS a ON a.attrelid = c.confrelid AND a.attnum = k.attnum
             ORDER BY k.ord) AS referenced_columns,
       c.confdeltype::text AS on_delete
FROM pg_constraint AS c
JOIN pg_class AS rc ON rc.oid = c.conrelid
JOIN pg_namespace AS rn ON rn.oid = rc.relnamespace
JOIN pg_class AS fc ON fc.oid = c.confrelid
JOIN pg_namespace AS fn ON fn.oid = fc.relnamespace
WHERE c.contype = 'f'
  AND c.conparentid = 0
  AND fn.nspname || '.' || fc.relname = ANY(%(tables)s::text[])
ORDER BY referenced_table, referencing_table, constraint_name
