-- The batch's rows of the policy's table, as the column their children reference:
-- the eligible rows in the key range (after, upto], as target_delete_batch.sql deletes
-- them. Composed into the children's deletes (target_delete_children.sql); FOR UPDATE
-- holds these rows from the first child delete to the parent delete, so a row updated
-- to a newer timestamp meanwhile is re-checked and kept together with its children.
SELECT {column}
FROM {table}
WHERE {key} > %(after)s
  AND {key} <= %(upto)s
  AND {ts} < %(cutoff)s
  AND {tenant_filter}
FOR UPDATE
