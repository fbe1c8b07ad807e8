-- Migration 0014: an object may have several remote resources (the object itself and
-- its derivatives: thumbnails, transcodes), each its own operation with its own key,
-- attempts, classes and dead letters. The local row goes only when every resource of
-- its object is confirmed.
--
-- resource: which resource of the object the operation deletes; 'object' is the
--   object itself (the policy's remote.endpoint), any other value names one of
--   remote.derivatives. Existing operations are all of the object itself.
-- parent_key: for a derivative, the operation key of its object's own operation
--   (the key of the object); NULL for the object's own operation. A derivative's
--   operation_key is sha256(parent_key | resource), so (parent_key, resource) is
--   unique, and the object's key, and every ledger keyed by it, stays as it was.
-- Columns are only added; nothing is renamed.
ALTER TABLE retention.operations
    ADD COLUMN IF NOT EXISTS resource text NOT NULL DEFAULT 'object',
    ADD COLUMN IF NOT EXISTS parent_key text;

-- One operation per resource of an object.
CREATE UNIQUE INDEX IF NOT EXISTS operations_object_resource
    ON retention.operations (parent_key, resource) WHERE parent_key IS NOT NULL;

CREATE OR REPLACE VIEW retention.dead_operations AS
SELECT operation_key, policy, tenant, object_id, row_key, version, failure_class,
       last_status_code, reason, attempt_count, claim_count, window_key,
       created_at, updated_at AS dead_since, resource, parent_key
FROM retention.operations
WHERE state = 'dead';
