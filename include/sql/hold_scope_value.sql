-- A tenant or object id as the policy's table stores it, as text: the given text read
-- through the column's own type (json_populate_record applies the type's input function,
-- so no type name is composed), then back to text, the form the holds fragment and an
-- erasure's scope compare ({column}::text). "042" on an integer column is "42"; an
-- upper-case UUID is lower-case. A text that is no value of the type raises (22P02 and
-- kin). Also how many rows match it now, counted up to %(count_limit)s. Read-only.
WITH given AS (
    SELECT (json_populate_record(NULL::{table},
                                 json_build_object(%(column)s::text, %(value)s::text))).{column}
           AS typed
)
SELECT given.typed::text AS value,
       (SELECT count(*) FROM (SELECT 1 FROM {table} AS t
                              WHERE t.{column} = given.typed
                              LIMIT %(count_limit)s) AS matched) AS rows_matching
FROM given
