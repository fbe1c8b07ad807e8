-- The tenant of one row of a policy's table, as text (what a tenant hold's value is
-- compared with), for explain's record of a row key of a policy without remote:.
-- Read-only: one probe of the key column's index; the caller bounds it with the
-- policy's statement_timeout and lock_timeout, at most what is left of the lookup's
-- deadline.
SELECT {tenant}::text AS tenant FROM {table} WHERE {key} = %(row_key)s
