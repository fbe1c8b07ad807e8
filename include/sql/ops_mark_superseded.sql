-- Operations confirmed by the API whose local row changed before its delete (a new
-- object, a new tenant, or no longer older than the cutoff): the row was left
-- alone; say so on the operation. Runs in the finish's transaction. Touches the
-- named operation rows.
UPDATE retention.operations
SET failure_class = 'superseded',
    reason = 'the API confirmed the deletion, but the row changed before its local delete '
             || '(object, tenant or age); the row was left alone',
    updated_at = now()
WHERE operation_key = ANY(%(keys)s)
