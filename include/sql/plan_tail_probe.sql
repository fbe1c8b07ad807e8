-- The next probe_rows keys of a scope above a key, and the last eligible one
-- among them: a bounded look past the end of the eligible range for rows whose
-- keys are out of time order (late commits, back-filled rows). Read-only.
SELECT max(k) FILTER (WHERE eligible) AS last_eligible, max(k) AS last_key, count(*) AS keys
FROM (
    SELECT {key} AS k, {ts} < %(cutoff)s AS eligible
    FROM {table}
    WHERE {key} > %(after)s
      AND {tenant_filter}
    ORDER BY {key}
    LIMIT %(probe_rows)s
) AS probe
