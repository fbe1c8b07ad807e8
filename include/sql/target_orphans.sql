-- Rows of a listed child table without a foreign key constraint whose parent key no
-- longer exists: what a delete outside retention (or a bug) left behind. Read-only.
SELECT count(*) AS orphans
FROM {child} AS c
WHERE c.{foreign_key} IS NOT NULL
  AND NOT EXISTS (SELECT 1 FROM {parent} AS p WHERE p.{column} = c.{foreign_key})
