-- The smallest eligible key of a tenant scope at or below a key: one walk up the
-- key index (or the (tenant, key) index) that stops at the first row older than
-- the cutoff. Old rows usually have the lowest keys, so this reads few rows; a
-- scope whose rows up to `upto` are all young is read up to `upto`. Read-only.
SELECT {key} AS k
FROM {table}
WHERE {ts} < %(cutoff)s
  AND {key} <= %(upto)s
  AND {tenant_filter}
ORDER BY {key}
LIMIT 1
