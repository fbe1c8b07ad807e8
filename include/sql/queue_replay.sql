-- Leased queue: move chosen dead jobs of a policy back to pending (attempts and
-- resets zeroed, due now) and write one audit row of retention.replays naming the
-- ids moved, in one statement. Filters: ids, failure class, dead since; the
-- caller refuses a replay with none of them.
-- The chosen rows are locked first, in id order (chosen): two replays of overlapping
-- rows (one by ids, one by failure class, each finding them in its own index's order)
-- then lock them in the same order, so the second waits for the first instead of the
-- two deadlocking; once the first commits, the second finds those rows no longer dead
-- and leaves them.
-- Touches the matching rows of the kind's table and one row of retention.replays.
WITH chosen AS (
    SELECT {id} AS job_id
    FROM {table}
    WHERE policy = %(policy)s
      AND state = 'dead'
      AND (%(ids)s::text[] IS NULL OR {id} = ANY(%(ids)s::text[]))
      AND (%(failure_class)s::text IS NULL OR failure_class = %(failure_class)s::text)
      AND (%(since)s::timestamptz IS NULL OR updated_at >= %(since)s::timestamptz)
    ORDER BY {id}
    FOR UPDATE
),
moved AS (
    UPDATE {table}
    SET state = 'pending',
        {attempts} = 0,
        {resets}
        not_before = now(),
        lease_owner = NULL,
        lease_expires_at = NULL,
        updated_at = now()
    FROM chosen
    WHERE {id} = chosen.job_id
    RETURNING {id} AS job_id
)
INSERT INTO retention.replays (kind, policy, requested_by, reason, filters, operation_keys)
SELECT %(kind)s, %(policy)s, %(requested_by)s, %(reason)s, %(filters)s,
       coalesce(array_agg(job_id ORDER BY job_id), ARRAY[]::text[])
FROM moved
RETURNING replay_id, operation_keys
