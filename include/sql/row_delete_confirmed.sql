-- Delete the local row of a confirmed remote deletion, in the same transaction
-- that marks its operation done; only the version the operation was made for
-- (a restored object has a new version and a new operation). Locks one row.
DELETE FROM {table}
WHERE {key} = %(row_key)s
  AND {version_expr} = %(version)s
