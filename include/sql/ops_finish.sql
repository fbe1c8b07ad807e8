-- Record attempts on operations this worker holds, as one statement (so one
-- atomic transaction and one round trip for a whole claimed batch, like River's
-- batch completer): each operation's new state (done, pending again with
-- not_before, or dead) and counters, one retention.attempts row each, and for
-- each done one, its local row, of the version, object and tenant the operation
-- was made for (a restored object has a new version and a new operation), and,
-- for operations the scan enqueued, only while the row is older than its
-- window's cutoff (the caller sets TimeZone to timestamp_timezone), and, when the policy
-- notifies, its retention.deleted event in the outbox (transactional outbox), listing
-- under resources.tables the rows deleted for that key by table: the policy's row and
-- its listed children, deleted by this statement through data-modifying CTEs driven by
-- gone (ops_finish_child.sql, one a child level), so a child row goes exactly when its
-- row does; the caller composes their count for a key (a JSON object by table, empty
-- without children) for the event and for the window's tally (child_tables).
-- An object with derivatives (remote.derivatives) has one operation per resource;
-- its row is deleted, and its event written, only by the finish that confirms the
-- last of them: the object_ready part is ops_finish_ready_resources.sql for such a
-- policy, else ops_finish_ready_object.sql (each done operation is its object's
-- only resource). Either defines judged (each recorded operation, op_ready when it
-- finishes its object), ready (those that do) and resource (each ready object's
-- remote resources, for its event).
-- A window's pass counts the batch in its window ledger (window_batch_done.sql)
-- in the same transaction, so the window's figures never disagree with the table.
-- A held row (an active hold, or its hold_column; binds %(hold_policy)s) is never
-- deleted: its confirmed operation is left alone, and the caller puts it in held.
-- The lease-owner guard makes a stale worker's writes no-ops: those keys do not
-- come back and nothing is written for them.
-- This is the operations kind's completer; other job kinds use queue_finish.sql.
-- Locks the named operation rows and at most one table row per operation.
WITH input AS (
    SELECT *
    FROM unnest(
        %(keys)s::text[], %(states)s::text[], %(attempt_spent)s::int[],
        %(rate_limited)s::int[], %(auth_failure)s::boolean[], %(not_before)s::timestamptz[],
        %(status)s::int[], %(outcome)s::text[], %(failure_class)s::text[], %(reason)s::text[],
        %(started_at)s::timestamptz[], %(finished_at)s::timestamptz[],
        %(duration_ms)s::double precision[]
    ) AS i(i_key, i_state, i_attempt_spent, i_rate_limited, i_auth_failure, i_not_before,
           i_status, i_outcome, i_failure_class, i_reason, i_started_at, i_finished_at,
           i_duration_ms)
), op AS (
    UPDATE retention.operations AS o
    SET state = i.i_state,
        attempt_count = o.attempt_count + i.i_attempt_spent,
        rate_limited_count = o.rate_limited_count + i.i_rate_limited,
        auth_failure_count = CASE WHEN i.i_auth_failure THEN o.auth_failure_count + 1 ELSE 0 END,
        not_before = coalesce(i.i_not_before, o.not_before),
        lease_owner = NULL,
        lease_expires_at = NULL,
        last_status_code = i.i_status,
        outcome_class = i.i_outcome,
        failure_class = i.i_failure_class,
        reason = i.i_reason,
        done_at = CASE WHEN i.i_state = 'done' THEN now() ELSE o.done_at END,
        updated_at = now()
    FROM input AS i
    WHERE o.operation_key = i.i_key
      AND o.lease_owner = %(owner)s
      AND o.state = 'in_flight'
    RETURNING o.operation_key AS op_key, o.row_key AS op_row_key, o.version AS op_version,
              i.i_state AS op_state, i.i_started_at AS op_started_at,
              i.i_finished_at AS op_finished_at, i.i_status AS op_status,
              i.i_outcome AS op_outcome, i.i_duration_ms AS op_duration_ms,
              o.object_id AS op_object_id, o.tenant AS op_tenant,
              o.policy_revision AS op_revision, o.attempt_count AS op_attempts,
              coalesce(o.parent_key, o.operation_key) AS op_object_key,
              (SELECT w.cutoff FROM retention.windows AS w
               WHERE w.window_key = o.window_key) AS op_cutoff
), {object_ready}, gone AS (
    -- Only the row the operation was made for: same version, object and tenant,
    -- and (for operations the scan enqueued) still older than its window's cutoff.
    -- Of objects whose every resource is confirmed (ready) only. Never a held row (a
    -- hold placed after the screen): it is left alone, with its children.
    DELETE FROM {table}
    USING ready
    WHERE {key} = ready.op_row_key
      AND {version_expr} = ready.op_version
      AND {object_id}::text = ready.op_object_id
      AND {tenant_text} IS NOT DISTINCT FROM ready.op_tenant
      AND (ready.op_cutoff IS NULL OR {ts} < ready.op_cutoff)
      AND NOT {held}
    RETURNING {key} AS gone_row_key{gone_columns}
){children}, event AS (
    INSERT INTO retention.outbox (event_id, policy, operation_key, event_type, payload)
    -- One event per object, keyed by the object's own operation key.
    SELECT 'evt_' || left(encode(sha256(convert_to('retention.deleted|' || ready.op_object_key,
                                                   'UTF8')), 'hex'), 32),
           %(policy)s, ready.op_object_key, 'retention.deleted',
           jsonb_build_object(
               'type', 'retention.deleted',
               'timestamp', to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
               'data', jsonb_build_object(
                   'policy', %(policy)s::text,
                   'policy_revision', ready.op_revision,
                   'operation_key', ready.op_object_key,
                   'object_id', ready.op_object_id,
                   'tenant', ready.op_tenant,
                   'version', ready.op_version,
                   'status_code', main.status_code,
                   'attempts', main.attempts,
                   'resources', jsonb_build_object('remote', (
                       SELECT jsonb_agg(jsonb_build_object(
                                  'name', r.resource,
                                  'operation_key', r.operation_key,
                                  'status_code', r.status_code,
                                  'attempts', r.attempts,
                                  'confirmed_at', to_char(r.confirmed_at AT TIME ZONE 'UTC',
                                                          'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'))
                              ORDER BY NOT r.is_object, r.resource)
                       FROM resource AS r
                       WHERE r.object_key = ready.op_object_key),
                       'tables', jsonb_build_object(
                           %(table_name)s::text,
                           (ready.op_row_key IN (SELECT gone.gone_row_key FROM gone))::int
                       ) || {event_child_tables})
               )
           )::text
    FROM ready
    LEFT JOIN resource AS main ON main.object_key = ready.op_object_key AND main.is_object
    WHERE %(notify)s
    ON CONFLICT (event_id) DO NOTHING
), attempt AS (
    INSERT INTO retention.attempts (
        operation_key, attempt_no, policy, lease_owner, started_at, finished_at,
        status_code, outcome_class, duration_ms
    )
    SELECT op.op_key,
           coalesce((SELECT max(a.attempt_no) FROM retention.attempts AS a
                     WHERE a.operation_key = op.op_key), 0) + 1,
           %(policy)s, %(owner)s, op.op_started_at, op.op_finished_at, op.op_status,
           op.op_outcome, op.op_duration_ms
    FROM op
)
SELECT judged.op_key,
       (judged.op_ready
        AND judged.op_row_key IN (SELECT gone.gone_row_key FROM gone))::int AS rows_deleted,
       (judged.op_ready
        AND judged.op_row_key NOT IN (SELECT gone.gone_row_key FROM gone)
        AND EXISTS (SELECT 1 FROM {table} WHERE {key} = judged.op_row_key)) AS row_left_alone,
       CASE WHEN judged.op_ready THEN {child_tables} ELSE '{{}}'::jsonb END AS child_tables
FROM judged
