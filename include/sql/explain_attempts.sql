-- One operation's API attempts in order, and the replays that named it. Read-only.
SELECT 'attempt' AS kind, attempt_no AS n, started_at AS at, status_code, outcome_class,
       duration_ms, lease_owner AS who, NULL::text AS reason
FROM retention.attempts
WHERE operation_key = %(key)s
UNION ALL
SELECT 'replay', replay_id::int, replayed_at, NULL, NULL, NULL, requested_by, reason
FROM retention.replays
WHERE %(key)s = ANY(operation_keys)
ORDER BY at
