-- Before calling: each claimed operation's row as it is now, so an operation
-- whose row was restored (a new version), whose object or tenant changed, or
-- that is no longer older than its cutoff (its window's, never later than
-- now − retain_days; now − retain_days for a hint's) is not called. Rows that are
-- gone do not come back (the object may still exist: it is called).
-- held: the row is held now (retention.holds, or the policy's hold_column; binds
-- hold_policy), so its object is not called.
-- Read-only; one index probe per row key. The caller sets the transaction's
-- TimeZone to the policy's timestamp_timezone.
SELECT c.c_position AS position,
       {key} AS row_key,
       {version_expr} AS version,
       {object_id}::text AS object_id,
       {tenant_text} AS tenant,
       coalesce({ts} < c.c_cutoff, false) AS still_eligible,
       {held} AS held
FROM unnest(%(row_keys)s::bigint[], %(cutoffs)s::timestamptz[])
     WITH ORDINALITY AS c(c_key, c_cutoff, c_position)
JOIN {table} ON {key} = c.c_key
