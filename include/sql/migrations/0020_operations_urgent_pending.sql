-- Migration 0020: an index for an erasure's claim, which takes urgent operations only.
--
-- The claim's filter, priority = 'urgent', is not the expression of the indexes of
-- migration 0017 ((priority <> 'urgent') = false is folded back to it by the planner),
-- so once an erasure's last urgent operation was claimed, its next claims read every
-- routine pending operation of the policy. This partial index holds the pending urgent
-- operations only (a handful, an erasure's scope), so the urgent claim is an ordered
-- scan of them whatever the routine backlog. Only an index is added.
CREATE INDEX IF NOT EXISTS operations_urgent_pending
    ON retention.operations (policy, not_before)
    WHERE state = 'pending' AND priority = 'urgent';
