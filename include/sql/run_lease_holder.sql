-- The run holding a policy's run lease (no row, or NULL: nobody). Read-only.
SELECT run_id FROM retention.run_leases WHERE policy = %(policy)s
