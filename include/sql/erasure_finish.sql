-- Record how an erasure's pass ended, and, when it is final (done, blocked_by_hold,
-- failed), its receipt: a retention.erased event in the policy's outbox (when the policy
-- notifies), in the same transaction (a transactional outbox, as ops_finish.sql's
-- retention.deleted events). The event id is derived from the erasure, so a repeated
-- finish writes no second event. Its per-table counts (rows_deleted) are those its
-- batches added as they committed (erasure_tally.sql, erasure_tally_operations.sql);
-- each table the policy deletes from (its own and its listed children, zero_tables) is
-- named, with 0 when nothing was deleted there. Touches one row of retention.erasures,
-- adds at most one row to retention.outbox.
WITH finished AS (
    UPDATE retention.erasures
    SET state = %(state)s,
        finished_at = CASE WHEN %(state)s IN ('done', 'blocked_by_hold', 'failed')
                           THEN coalesce(finished_at, now()) END,
        rows_deleted = %(zero_tables)s::jsonb || rows_deleted,
        objects = %(objects)s::jsonb,
        blocking_holds = %(blocking_holds)s::jsonb,
        error = %(error)s,
        updated_at = now()
    WHERE erasure_id = %(erasure_id)s AND state IN ('requested', 'running')
    RETURNING *
), event AS (
    INSERT INTO retention.outbox (event_id, policy, operation_key, event_type, payload)
    SELECT 'evt_' || left(encode(sha256(convert_to('retention.erased|' || f.erasure_id::text,
                                                   'UTF8')), 'hex'), 32),
           f.policy, 'erasure:' || f.erasure_id::text, 'retention.erased',
           jsonb_build_object(
               'type', 'retention.erased',
               'timestamp', to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
               'data', jsonb_build_object(
                   'erasure_id', f.erasure_id,
                   'request_key', f.request_key,
                   'policy', f.policy,
                   'scope', jsonb_build_object(f.scope, f.value),
                   'state', f.state,
                   'reason', f.reason,
                   'requested_by', f.requested_by,
                   'requested_at', f.requested_at,
                   'deadline', f.deadline,
                   'finished_at', f.finished_at,
                   'passes', f.passes,
                   'rows_deleted', f.rows_deleted,
                   'objects', f.objects,
                   'blocking_holds', f.blocking_holds
               )
           )::text
    FROM finished AS f
    WHERE f.finished_at IS NOT NULL AND %(notify)s
    ON CONFLICT (event_id) DO NOTHING
    RETURNING event_id
)
SELECT f.*, (SELECT event_id FROM event) AS event_id FROM finished AS f
