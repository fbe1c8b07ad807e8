-- Whether the policy's API answered 2xx for this resource (the object itself, or
-- one derivative) in the last day: evidence that the resource's endpoint template
-- and connection reach real objects, so a 404 means "already gone".
-- Read-only; uses attempts_policy_time and the operations' primary key.
SELECT EXISTS (
    SELECT 1
    FROM retention.attempts AS a
    JOIN retention.operations AS o ON o.operation_key = a.operation_key
    WHERE a.policy = %(policy)s
      AND a.status_code BETWEEN 200 AND 299
      AND a.finished_at > now() - interval '1 day'
      AND o.resource = %(resource)s
) AS verified
