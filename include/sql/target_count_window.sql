-- Count the eligible rows still inside one window (dry runs and reconciliation); a
-- row a legal hold keeps is not eligible (binds hold_policy).
-- Read-only; bounded by the window's key range.
SELECT count(*) AS n
FROM {table}
WHERE {key} BETWEEN %(first_id)s AND %(last_id)s
  AND {ts} < %(cutoff)s
  AND {tenant_filter}
  AND NOT {held}
