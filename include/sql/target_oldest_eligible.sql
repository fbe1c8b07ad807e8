-- The timestamp of the oldest row still older than the cutoff (NULL when none remains):
-- the run's lag (how long it has been eligible) in the Retention view and the lag
-- alert, and its age in the oldest_eligible_age_seconds gauge. Read-only; reads the
-- low end of the timestamp index (nothing after a clean run). A column without a time
-- zone is read in the session's TimeZone, which callers set to the policy's zone.
-- A row a legal hold keeps is no lag: it is skipped (binds hold_policy).
SELECT min({ts}) AS oldest FROM {table} WHERE {ts} < %(cutoff)s AND NOT {held}
