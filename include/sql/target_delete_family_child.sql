-- One level of target_delete_family.sql: the rows of a child table whose foreign key
-- holds a key that the delete of its parent (a CTE of the same statement) returned.
, {cte} AS (
    DELETE FROM {child}
    WHERE {foreign_key} IN (SELECT {column} FROM {parent})
    RETURNING {returning}
)
