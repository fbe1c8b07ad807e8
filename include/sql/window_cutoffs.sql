-- The cutoff of each named window (operations the scan enqueued carry their window). Read-only.
SELECT window_key, cutoff FROM retention.windows WHERE window_key = ANY(%(window_keys)s)
