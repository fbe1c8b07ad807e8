-- Whether the policy's API confirmed any deletion in the last hour: evidence that
-- its credentials work, so a 403 for one object is about that object. Read-only.
SELECT EXISTS (
    SELECT 1 FROM retention.attempts
    WHERE policy = %(policy)s
      AND outcome_class = 'confirmed'
      AND finished_at > now() - interval '1 hour'
) AS recent
