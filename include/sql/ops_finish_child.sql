-- One listed child level of ops_finish.sql (not a statement of its own): the rows of a
-- child table whose foreign key holds a key that the delete of its parent returned
-- (gone, the policy's rows the finish deletes, or the level above), with the key of
-- the policy's row they descend from (gone_root_key), so the finish counts them per
-- object for the event and the window's tally. Driven by what gone deleted only, so a
-- child row goes exactly when its parent row goes: never when the row stays (a
-- resource not yet confirmed, a lease lost, a row changed). One statement, so the
-- foreign keys are checked when it ends, with parents and children both gone.
, {cte} AS (
    DELETE FROM {child} AS child_row
    USING {parent} AS parent_row
    WHERE child_row.{foreign_key} = parent_row.{column}
    RETURNING {returning}parent_row.{root} AS gone_root_key
)
