-- A policy's leased-queue backlog by kind and state, for the operations,
-- dead_letters and events.pending gauges: every state but done / delivered,
-- whose counts only grow until the audit purge. Read-only.
SELECT 'operations' AS kind, state, count(*) AS n
FROM retention.operations
WHERE policy = %(policy)s AND state IN ('pending', 'in_flight', 'dead', 'held')
GROUP BY state
UNION ALL
SELECT 'events' AS kind, state, count(*) AS n
FROM retention.outbox
WHERE policy = %(policy)s AND state IN ('pending', 'in_flight', 'dead')
GROUP BY state
