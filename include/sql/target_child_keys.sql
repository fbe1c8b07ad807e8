-- The rows of a child table whose parents are in the parent keys, as the column their
-- own children reference: one level of the chain target_delete_children.sql deletes.
SELECT {column}
FROM {child}
WHERE {foreign_key} IN ({parent_keys})
