-- Operations confirmed by the API whose local row a hold placed after the screen kept
-- (ops_finish.sql deletes no held row, nor its children): the remote object is gone,
-- the row and its children stay while the hold lasts. The operation waits in held,
-- no failure: lifting the hold makes it pending, its call finds the object already
-- gone, and that finish deletes the row. Runs in the finish's transaction; binds
-- %(hold_policy)s. Touches the named operations whose row is held.
UPDATE retention.operations AS o
SET state = 'held',
    done_at = NULL,
    failure_class = 'held',
    reason = 'the API confirmed the deletion of the object, but a hold placed before its '
             || 'local delete keeps the row (and its children): the remote object is gone, '
             || 'the row stays until the hold is lifted',
    updated_at = now()
WHERE o.operation_key = ANY(%(keys)s::text[])
  AND o.row_key IN (SELECT {key}
                    FROM {table}
                    WHERE {key} IN (SELECT r.row_key FROM retention.operations AS r
                                    WHERE r.operation_key = ANY(%(keys)s::text[]))
                      AND {held})
RETURNING o.operation_key
