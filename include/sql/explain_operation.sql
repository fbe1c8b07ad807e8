-- Everything durable about one operation: the operation, the window and run that
-- made it eligible, and its retention.deleted event (its object's, for a
-- derivative's operation: one event per object), with the rows it says were deleted
-- by table (data.resources.tables). Read-only.
SELECT o.*,
       w.run_id AS window_run_id, w.cutoff AS window_cutoff, w.first_id, w.last_id,
       r.logical_date AS run_logical_date, r.anchor_source AS run_anchor_source,
       r.dag_id AS run_dag_id,
       e.event_id, e.state AS event_state, e.attempts AS event_attempts,
       e.delivered_at AS event_delivered_at, e.last_status_code AS event_last_status,
       e.not_before AS event_not_before,
       e.payload::jsonb -> 'data' -> 'resources' -> 'tables' AS event_tables
FROM retention.operations AS o
LEFT JOIN retention.windows AS w ON w.window_key = o.window_key
LEFT JOIN retention.runs AS r ON r.policy = w.policy AND r.run_id = w.run_id
LEFT JOIN retention.outbox AS e ON e.operation_key = coalesce(o.parent_key, o.operation_key)
WHERE o.operation_key = %(key)s
