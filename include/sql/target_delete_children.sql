-- Delete the rows of a child table whose parents are in the parent keys (the batch's rows
-- of the policy's table, through the levels above this child). Runs in the batch's
-- transaction, deepest child first, before the parents it references are deleted.
DELETE FROM {child}
WHERE {foreign_key} IN ({parent_keys})
