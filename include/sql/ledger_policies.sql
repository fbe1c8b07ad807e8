-- Every policy name that has rows in the ledger (runs, windows, operations, events,
-- hint receipts, replays): a loose index scan of each, so the cost grows with the
-- number of policies, not rows. Read-only.
WITH RECURSIVE ops AS (
    (SELECT policy FROM retention.operations ORDER BY policy LIMIT 1)
    UNION ALL
    SELECT (SELECT o.policy FROM retention.operations AS o
            WHERE o.policy > ops.policy ORDER BY o.policy LIMIT 1)
    FROM ops WHERE ops.policy IS NOT NULL
)
SELECT policy FROM ops WHERE policy IS NOT NULL
UNION SELECT DISTINCT policy FROM retention.runs
UNION SELECT DISTINCT policy FROM retention.windows
UNION SELECT DISTINCT policy FROM retention.outbox
UNION SELECT DISTINCT policy FROM retention.hint_receipts
UNION SELECT DISTINCT policy FROM retention.replays
