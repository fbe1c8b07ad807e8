-- The smallest eligible key of a tenant scope: one walk up the key index that
-- stops at the first row older than the cutoff (old rows usually have the
-- lowest keys, so this reads a handful of rows). Read-only.
SELECT {key} AS k
FROM {table}
WHERE {ts} < %(cutoff)s
  AND {tenant_filter}
ORDER BY {key}
LIMIT 1
