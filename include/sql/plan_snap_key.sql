-- The first key of a scope at or after a cut point, within the planned range:
-- one index probe per window, so no window starts in an empty stretch of keys.
-- Read-only.
SELECT {key} AS k
FROM {table}
WHERE {key} >= %(at)s
  AND {key} <= %(upto)s
  AND {tenant_filter}
ORDER BY {key}
LIMIT 1
