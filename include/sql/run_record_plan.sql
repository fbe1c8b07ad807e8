-- Record a run's plan. A run id seen before under another plan_id (the DAG run
-- was re-created) starts its row afresh; the old plan's windows stay as evidence.
-- Touches one row of retention.runs.
INSERT INTO retention.runs (
    policy, run_id, plan_id, dag_id, table_name, logical_date, anchor_source, cutoff, dry_run,
    window_rows, batch_rows, windows, rows_planned, plan_seconds, plan_notes
) VALUES (
    %(policy)s, %(run_id)s, %(plan_id)s, %(dag_id)s, %(table_name)s, %(logical_date)s, %(anchor_source)s,
    %(cutoff)s, %(dry_run)s, %(window_rows)s, %(batch_rows)s, %(windows)s, %(rows_planned)s,
    %(plan_seconds)s, %(plan_notes)s
)
ON CONFLICT (policy, run_id) DO UPDATE
SET plan_id = excluded.plan_id, dag_id = excluded.dag_id, table_name = excluded.table_name,
    logical_date = excluded.logical_date, anchor_source = excluded.anchor_source,
    cutoff = excluded.cutoff, dry_run = excluded.dry_run, status = 'planned',
    window_rows = excluded.window_rows, batch_rows = excluded.batch_rows,
    windows = excluded.windows, rows_planned = excluded.rows_planned, plan_notes = excluded.plan_notes,
    rows_deleted = NULL, rows_counted = NULL, rows_remaining = NULL,
    rows_outside_windows = NULL, plan_seconds = excluded.plan_seconds,
    delete_seconds = NULL, reconcile_seconds = NULL, longest_batch_ms = NULL,
    planned_at = now(), finished_at = NULL, summary = NULL, drain = NULL,
    events_delivery = NULL
WHERE retention.runs.plan_id <> excluded.plan_id
