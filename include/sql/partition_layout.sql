-- How a table is partitioned: the strategy and the key's columns (no row when
-- the table is not partitioned), and whether it has a default partition. Reads the
-- catalog only; the caller sets DateStyle ISO for the transaction, as for every
-- statement that reads partition bounds.
SELECT p.partstrat AS strategy,
       array_agg(a.attname ORDER BY k.ord) AS key_columns,
       EXISTS (
           SELECT 1 FROM pg_inherits AS i JOIN pg_class AS d ON d.oid = i.inhrelid
           WHERE i.inhparent = p.partrelid AND pg_get_expr(d.relpartbound, d.oid) = 'DEFAULT'
       ) AS has_default
FROM pg_partitioned_table AS p
CROSS JOIN LATERAL unnest(p.partattrs::int2[]) WITH ORDINALITY AS k(attnum, ord)
LEFT JOIN pg_attribute AS a ON a.attrelid = p.partrelid AND a.attnum = k.attnum
WHERE p.partrelid = to_regclass(format('%%I.%%I', %(schema)s::text, %(table)s::text))
GROUP BY p.partstrat, p.partrelid
