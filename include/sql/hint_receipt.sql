-- Record a hint's webhook-id; no row back means it was received before (a repeat).
-- Runs in the same transaction as the operations it upserts.
INSERT INTO retention.hint_receipts (webhook_id, policy, objects)
VALUES (%(webhook_id)s, %(policy)s, %(objects)s)
ON CONFLICT (webhook_id) DO NOTHING
RETURNING webhook_id
