-- Record what a run's deliver_events task did (figures or error). Touches one row
-- of retention.runs.
UPDATE retention.runs SET events_delivery = %(delivery)s
WHERE policy = %(policy)s AND run_id = %(run_id)s
