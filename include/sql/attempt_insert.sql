-- One row per deliberate API attempt (identifiers, timings and status only).
INSERT INTO retention.attempts (
    operation_key, attempt_no, policy, lease_owner, started_at, finished_at,
    status_code, outcome_class, duration_ms
)
SELECT %(operation_key)s, coalesce(max(attempt_no), 0) + 1, %(policy)s, %(owner)s,
       %(started_at)s, %(finished_at)s, %(status)s, %(outcome)s, %(duration_ms)s
FROM retention.attempts
WHERE operation_key = %(operation_key)s
