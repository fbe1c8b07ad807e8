-- Whether any eligible row has no tenant; such rows get a window group of their own.
-- Read-only.
SELECT EXISTS (
    SELECT 1 FROM {table} WHERE {tenant} IS NULL AND {ts} < %(cutoff)s
) AS present
