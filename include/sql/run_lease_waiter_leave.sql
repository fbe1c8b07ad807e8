-- Runs no longer waiting for the policy's run lease: the one that took it, waiters
-- whose DAG run has ended (named), and any that stopped looking a day ago or more.
-- Touches rows of retention.run_lease_waiters of one policy.
DELETE FROM retention.run_lease_waiters
WHERE policy = %(policy)s
  AND (run_id = ANY(%(run_ids)s::text[]) OR last_seen < now() - interval '1 day')
