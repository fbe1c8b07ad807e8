-- The largest key of a scope at or below a key (one probe of the key index, or
-- of the (tenant, key) index, from `upto` down). Read-only.
SELECT {key} AS k
FROM {table}
WHERE {key} <= %(upto)s
  AND {tenant_filter}
ORDER BY {key} DESC
LIMIT 1
