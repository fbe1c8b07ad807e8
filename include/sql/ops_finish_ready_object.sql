-- Part of ops_finish.sql (its object_ready part) for a policy without
-- remote.derivatives: each operation is its object's only resource, so every done
-- one finishes its object (op_ready), and its event lists that one resource. The
-- ledger is not read again. Not a statement of its own; see
-- ops_finish_ready_resources.sql for objects with derivatives.
judged AS (
    SELECT op.*, op.op_state = 'done' AS op_ready
    FROM op
), ready AS (
    SELECT * FROM judged WHERE judged.op_ready
), resource AS (
    SELECT ready.op_object_key AS object_key, ready.op_key AS operation_key,
           'object'::text AS resource, true AS is_object, ready.op_status AS status_code,
           ready.op_attempts AS attempts, now() AS confirmed_at
    FROM ready
)
