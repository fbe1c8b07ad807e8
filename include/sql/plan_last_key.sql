-- The largest key of a scope (one probe of the key index from the top).
-- Read-only.
SELECT {key} AS k
FROM {table}
WHERE {tenant_filter}
ORDER BY {key} DESC
LIMIT 1
