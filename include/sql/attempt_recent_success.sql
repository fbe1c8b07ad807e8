-- Whether the policy's API answered 2xx in the last day: evidence that its endpoint
-- template and connection reach real objects, so a 404 means "already gone".
-- Read-only; uses attempts_policy_time.
SELECT EXISTS (
    SELECT 1 FROM retention.attempts
    WHERE policy = %(policy)s
      AND status_code BETWEEN 200 AND 299
      AND finished_at > now() - interval '1 day'
) AS verified
