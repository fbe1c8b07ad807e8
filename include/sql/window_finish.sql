-- Close a window attempt (done, counted for a dry run, or failed) with its timings,
-- the pauses it waited (added to earlier attempts', per reason) and, for a remote
-- window, where its worker pass spent its time (drain_time: numbers added to earlier
-- attempts', a text such as pool_unread replaced by this attempt's).
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
    drain_time = (
        SELECT coalesce(jsonb_object_agg(
                   key,
                   CASE WHEN jsonb_typeof(earlier.value) = 'number'
                             AND jsonb_typeof(this.value) = 'number'
                        THEN to_jsonb(earlier.value::numeric + this.value::numeric)
                        ELSE coalesce(this.value, earlier.value) END
               ), jsonb_build_object())
        FROM jsonb_each(drain_time) AS earlier
        FULL JOIN jsonb_each(%(drain_time)s::jsonb) AS this USING (key)
    ),
    finished_at = now()
WHERE window_key = %(window_key)s
