-- Held operations of a policy that no active hold keeps any more, back to pending
-- and due now (a hold was lifted, or a run re-checks what the remote side held). The
-- screen re-checks each one just before its call, so one still held by the row's
-- hold_column or the remote side goes back to held without an attempt spent.
-- Locks the operations it moves.
UPDATE retention.operations AS o
SET state = 'pending', not_before = now(), updated_at = now(),
    reason = 'released from held: ' || coalesce(o.reason, '')
WHERE o.policy = %(policy)s
  AND o.state = 'held'
  AND NOT EXISTS (
      SELECT 1 FROM retention.holds AS h
      WHERE h.lifted_at IS NULL
        AND (h.policy IS NULL OR h.policy = o.policy)
        AND ((h.match = 'tenant' AND h.value = o.tenant)
             OR (h.match = 'key' AND h.value = o.row_key::text)
             OR (h.match = 'object' AND h.value = o.object_id)))
RETURNING o.operation_key
