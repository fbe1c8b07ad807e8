-- Wait for, then hold until the transaction ends, one transaction-scoped advisory
-- lock per object (its own operation key), taken in the order given (the caller
-- sorts the keys, so two finishes never wait for each other in a cycle). Taken
-- before ops_finish.sql for a policy with derivatives, so that statement's snapshot
-- sees every resource another worker confirmed for the same objects.
-- Locks nothing but the advisory locks; touches no table.
SELECT count(pg_advisory_xact_lock(hashtextextended('retention.object|' || k, 0))) AS locked
FROM unnest(%(keys)s::text[]) AS t(k)
