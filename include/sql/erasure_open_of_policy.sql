-- Whether the policy has an open erasure (requested or running): only then does a finish
-- batch send what it deleted to erasure_tally_operations.sql (most batches have none to
-- count toward, and the arrays cost more to send than this probe). Read-only; a probe of
-- the few open erasures (erasures_open).
SELECT EXISTS (SELECT 1
               FROM retention.erasures
               WHERE policy = %(policy)s AND state IN ('requested', 'running')) AS open
