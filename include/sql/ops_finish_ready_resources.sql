-- Part of ops_finish.sql (its object_ready part) for a policy with remote.derivatives,
-- where an object has one operation per resource: an operation finishes its object
-- (op_ready) when it is done, every resource the policy names has an operation of the
-- object confirmed (before, or by this batch), so does every other operation of the
-- object, and it is the first by key of the object's resources this batch confirmed, so an object's row is deleted and its event written once,
-- by the confirmation of its last resource. Not a statement of its own.
-- The caller holds each finished object's advisory lock (ops_lock_objects.sql)
-- from before the statement's snapshot, so two workers confirming an object's last
-- two resources at once cannot both miss the other's confirmation. Reads the
-- object's operations (primary key, operations_object_resource).
judged AS (
    SELECT op.*,
           (op.op_state = 'done'
            -- every resource the policy names (%(resources)s: the object, then each
            -- derivative) has an operation confirmed before or by this batch: a missing
            -- one (an object enqueued before its derivatives were added) keeps the row
            AND NOT EXISTS (
                SELECT 1 FROM unnest(%(resources)s::text[]) AS named(resource)
                WHERE NOT EXISTS (
                    SELECT 1
                    FROM (SELECT s.operation_key, s.resource, s.state
                          FROM retention.operations AS s
                          WHERE s.operation_key = op.op_object_key
                          UNION ALL
                          SELECT s.operation_key, s.resource, s.state
                          FROM retention.operations AS s
                          WHERE s.parent_key = op.op_object_key) AS sibling
                    WHERE sibling.resource = named.resource
                      AND (sibling.state = 'done'
                           OR sibling.operation_key IN (
                               SELECT d.op_key FROM op AS d WHERE d.op_state = 'done'))))
            AND NOT EXISTS (
                SELECT 1
                FROM (SELECT s.operation_key, s.state FROM retention.operations AS s
                      WHERE s.operation_key = op.op_object_key
                      UNION ALL
                      SELECT s.operation_key, s.state FROM retention.operations AS s
                      WHERE s.parent_key = op.op_object_key) AS sibling
                WHERE sibling.state <> 'done'
                  AND sibling.operation_key NOT IN (
                      SELECT d.op_key FROM op AS d WHERE d.op_state = 'done'))
            AND NOT EXISTS (
                SELECT 1 FROM op AS d
                WHERE d.op_object_key = op.op_object_key AND d.op_state = 'done'
                  AND d.op_key < op.op_key)) AS op_ready
    FROM op
), ready AS (
    SELECT * FROM judged WHERE judged.op_ready
), resource AS (
    -- Every remote resource of each ready object, with its confirmation (this
    -- batch's, or the one recorded before).
    SELECT ready.op_object_key AS object_key, s.operation_key, s.resource,
           s.parent_key IS NULL AS is_object,
           coalesce(b.op_status, s.last_status_code) AS status_code,
           coalesce(b.op_attempts, s.attempt_count) AS attempts,
           CASE WHEN b.op_key IS NULL THEN s.done_at ELSE now() END AS confirmed_at
    FROM ready
    CROSS JOIN LATERAL (
        SELECT o.operation_key, o.resource, o.parent_key, o.last_status_code,
               o.attempt_count, o.done_at
        FROM retention.operations AS o WHERE o.operation_key = ready.op_object_key
        UNION ALL
        SELECT o.operation_key, o.resource, o.parent_key, o.last_status_code,
               o.attempt_count, o.done_at
        FROM retention.operations AS o WHERE o.parent_key = ready.op_object_key
    ) AS s
    LEFT JOIN op AS b ON b.op_key = s.operation_key
)
