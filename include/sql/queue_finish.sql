-- Leased queue: record the outcome of attempts on jobs this worker holds, as one
-- statement for a whole batch: done (done_state), pending again (a retry, with
-- not_before; or a snooze, spending no attempt) or dead. The lease-owner guard
-- makes a stale worker's writes no-ops: those ids do not come back.
-- The operations kind completes through ops_finish.sql instead, whose statement
-- also deletes the local row and writes the attempt and the outbox event.
-- Touches the named rows of the kind's table.
WITH input AS (
    SELECT *
    FROM unnest(
        %(ids)s::text[], %(states)s::text[], %(attempt_spent)s::int[],
        %(not_before)s::timestamptz[], %(status)s::int[], %(failure_class)s::text[],
        %(reason)s::text[]
    ) AS i(i_id, i_state, i_attempt_spent, i_not_before, i_status, i_failure_class, i_reason)
)
UPDATE {table} AS q
SET state = i.i_state,
    {attempts} = {q_attempts} + i.i_attempt_spent,
    not_before = coalesce(i.i_not_before, q.not_before),
    lease_owner = NULL,
    lease_expires_at = NULL,
    last_status_code = i.i_status,
    failure_class = i.i_failure_class,
    {reason} = i.i_reason,
    {done_at} = CASE WHEN i.i_state = %(done_state)s THEN now() ELSE {q_done_at} END,
    updated_at = now()
FROM input AS i
WHERE {q_id} = i.i_id
  AND q.lease_owner = %(owner)s
  AND q.state = 'in_flight'
RETURNING {q_id} AS job_id
