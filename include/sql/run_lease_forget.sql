-- Forget the run lease row of a policy no longer in the policies file, if no run holds
-- it (a held one stays until its run ends). Touches at most one row of retention.run_leases.
DELETE FROM retention.run_leases WHERE policy = %(policy)s AND run_id IS NULL
