-- Store a run's reconciliation summary. Touches one row of retention.runs.
UPDATE retention.runs
SET status = %(status)s,
    windows = %(windows)s,
    rows_deleted = %(rows_deleted)s,
    rows_counted = %(rows_counted)s,
    rows_remaining = %(rows_remaining)s,
    rows_outside_windows = %(rows_outside_windows)s,
    delete_seconds = %(delete_seconds)s,
    reconcile_seconds = %(reconcile_seconds)s,
    longest_batch_ms = %(longest_batch_ms)s,
    finished_at = now(),
    summary = %(summary)s
WHERE policy = %(policy)s AND run_id = %(run_id)s
