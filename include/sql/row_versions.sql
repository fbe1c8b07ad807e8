-- The current version of each named row, to skip operations whose row was
-- restored (a new version) since they were enqueued. Read-only.
SELECT {key} AS row_key, {version_expr} AS version
FROM {table}
WHERE {key} = ANY(%(row_keys)s)
