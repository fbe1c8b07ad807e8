-- Whether a partition holds a held row (the rule of hold_row_held.sql: an active hold on
-- its key or tenant, or the policy's hold_column). Such a partition is never detached or
-- dropped: the row path deletes the rest and keeps the held rows. Read-only.
--
-- Each kind of hold is its own probe, so a key or tenant hold reads the partition through
-- its key or tenant index (a lookup per held value) rather than reading every row:
-- held_keys are the active key holds' keys; tenant_held looks up the tenant holds' values
-- read through the column's own type (partition_held_tenant.sql, or FALSE when there are
-- none). Only hold_column (column_held, or FALSE) needs a scan,
-- which stops at the first held row.
SELECT EXISTS (SELECT 1 FROM {partition} AS p WHERE p.{key} = ANY (%(held_keys)s::bigint[]))
    OR {tenant_held}
    OR EXISTS (SELECT 1 FROM {partition} AS p WHERE {column_held}) AS held
