-- The age in seconds of the oldest row still older than the cutoff (NULL when none
-- remains), for the oldest_eligible_age_seconds gauge. Read-only; reads the low end
-- of the timestamp index (empty after a clean run). A column without a time zone is
-- read in the session's TimeZone, which the caller sets to the policy's zone.
SELECT extract(epoch FROM now() - min({ts})::timestamptz)::float8 AS age_seconds
FROM {table}
WHERE {ts} < %(cutoff)s
