-- Close a window attempt (done, counted for a dry run, or failed) with its timings
-- and the pauses it waited (added to earlier attempts', per reason).
-- Touches one row of retention.windows.
UPDATE retention.windows
SET state = %(state)s,
    seconds = seconds + %(seconds)s,
    timeouts = timeouts + %(timeouts)s,
    rows_counted = coalesce(%(rows_counted)s, rows_counted),
    last_error = %(last_error)s,
    pauses = pauses + %(pauses)s,
    paused_seconds = paused_seconds + %(paused_seconds)s,
    pause_reasons = (
        SELECT jsonb_object_agg(merged.kind, merged.seconds)
        FROM (
            SELECT e.key AS kind, sum(e.value::numeric) AS seconds
            FROM (
                SELECT * FROM jsonb_each_text(coalesce(pause_reasons, jsonb_build_object()))
                UNION ALL
                SELECT * FROM jsonb_each_text(%(pause_reasons)s::jsonb)
            ) AS e
            GROUP BY e.key
        ) AS merged
    ),
    finished_at = now()
WHERE window_key = %(window_key)s
