-- Every policy name that has rows in the ledger's large tables (operations,
-- outbox, windows, runs), by loose index scans on their leading policy column, so
-- the cost grows with the number of policies, not rows; plus the small tables
-- (hint receipts, replays, alerts, run leases, lifted holds, finished erasures).
-- Read-only.
WITH RECURSIVE ops AS (
    (SELECT policy FROM retention.operations ORDER BY policy LIMIT 1)
    UNION ALL
    SELECT (SELECT o.policy FROM retention.operations AS o
            WHERE o.policy > ops.policy ORDER BY o.policy LIMIT 1)
    FROM ops WHERE ops.policy IS NOT NULL
), events AS (
    (SELECT policy FROM retention.outbox ORDER BY policy LIMIT 1)
    UNION ALL
    SELECT (SELECT e.policy FROM retention.outbox AS e
            WHERE e.policy > events.policy ORDER BY e.policy LIMIT 1)
    FROM events WHERE events.policy IS NOT NULL
), wins AS (
    (SELECT policy FROM retention.windows ORDER BY policy LIMIT 1)
    UNION ALL
    SELECT (SELECT w.policy FROM retention.windows AS w
            WHERE w.policy > wins.policy ORDER BY w.policy LIMIT 1)
    FROM wins WHERE wins.policy IS NOT NULL
), runs AS (
    (SELECT policy FROM retention.runs ORDER BY policy LIMIT 1)
    UNION ALL
    SELECT (SELECT r.policy FROM retention.runs AS r
            WHERE r.policy > runs.policy ORDER BY r.policy LIMIT 1)
    FROM runs WHERE runs.policy IS NOT NULL
)
SELECT policy FROM ops WHERE policy IS NOT NULL
UNION SELECT policy FROM events WHERE policy IS NOT NULL
UNION SELECT policy FROM wins WHERE policy IS NOT NULL
UNION SELECT policy FROM runs WHERE policy IS NOT NULL
UNION SELECT DISTINCT policy FROM retention.hint_receipts
UNION SELECT DISTINCT policy FROM retention.replays
UNION SELECT DISTINCT policy FROM retention.alerts
UNION SELECT policy FROM retention.run_leases
UNION SELECT DISTINCT policy FROM retention.holds
      WHERE policy IS NOT NULL AND lifted_at IS NOT NULL
UNION SELECT DISTINCT policy FROM retention.erasures
      WHERE state IN ('done', 'blocked_by_hold', 'failed')
