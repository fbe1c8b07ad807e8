-- One hold value read through the type of a column of a table (json_populate_record
-- applies the type's input function; no type name is composed), as that type's text.
-- Raises (22P02 and kin) for a value the type does not accept, which then matches no
-- row of that column. Read-only.
SELECT (json_populate_record(NULL::{table},
                             json_build_object(%(column)s::text, %(value)s::text))).{column}::text
       AS value
