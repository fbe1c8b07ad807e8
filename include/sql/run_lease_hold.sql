-- Lock the policy's run lease row (created free on first use) and read its holder:
-- the no-op update takes the row lock until the caller's transaction ends.
-- Touches one row of retention.run_leases.
INSERT INTO retention.run_leases AS lease (policy, dag_id)
VALUES (%(policy)s, %(dag_id)s)
ON CONFLICT (policy) DO UPDATE SET policy = lease.policy
RETURNING lease.run_id, lease.taken_at
