-- How many rows of an erasure's scope are still in the policy's table, whatever their
-- age ({scope_filter} names the scope's column), and why some of them stay: held by
-- an active hold or the hold_column (the delete statements' own held-row predicate;
-- binds %(hold_policy)s), by the hold_column alone, or by the
-- remote side (an operation of the row in state 'held' with no hold behind it: a
-- remote.held_statuses answer). Read-only; the held operations are one probe of
-- operations_held.
SELECT count(*) AS rows_left,
       count(*) FILTER (WHERE {held} OR {key} IN (SELECT o.row_key
                                                  FROM retention.operations AS o
                                                  WHERE o.policy = %(hold_policy)s
                                                    AND o.state = 'held')) AS rows_held,
       count(*) FILTER (WHERE {held_by_column}) AS rows_held_by_column,
       count(*) FILTER (WHERE NOT {held} AND {key} IN (SELECT o.row_key
                                                       FROM retention.operations AS o
                                                       WHERE o.policy = %(hold_policy)s
                                                         AND o.state = 'held'))
           AS rows_held_remotely
FROM {table}
WHERE {scope_filter}
