-- One run's summary row. Read-only.
SELECT * FROM retention.runs WHERE policy = %(policy)s AND run_id = %(run_id)s
