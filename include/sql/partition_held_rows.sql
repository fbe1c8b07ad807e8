-- Whether a partition holds a held row (hold_row_held.sql: an active hold on its key
-- or tenant, or the policy's hold_column). Such a partition is never detached or
-- dropped: the row path deletes the rest and keeps the held rows. Read-only; stops
-- at the first held row. Binds hold_policy.
SELECT EXISTS (SELECT 1 FROM {partition} WHERE {held}) AS held
