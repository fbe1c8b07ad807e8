-- Leased queue, any job kind (its table: retention.operations or retention.outbox).
-- The figures a dashboard watches while a drain runs, read at every worker pass: the
-- age of the policy's oldest pending job and of its oldest leased (in flight) one,
-- each since it was enqueued, and how many of its jobs are dead (the dead-letter
-- queue's depth). An age is NULL when no job is in that state. Read-only; takes no
-- row locks (the partial indexes by state, then the rows they name).
SELECT
    (SELECT extract(epoch FROM now() - min(created_at))::float8 FROM {table}
     WHERE policy = %(policy)s AND state = 'pending') AS oldest_pending_seconds,
    (SELECT extract(epoch FROM now() - min(created_at))::float8 FROM {table}
     WHERE policy = %(policy)s AND state = 'in_flight') AS oldest_leased_seconds,
    (SELECT count(*) FROM {table}
     WHERE policy = %(policy)s AND state = 'dead') AS dead
