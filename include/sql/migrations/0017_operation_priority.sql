-- Migration 0017: a priority on remote operations. The leased queue claims a policy's
-- due operations by priority, then by not_before, so an urgent erasure's operations
-- go ahead of a routine backlog in the same limiter scope (under the same rate limit:
-- priority decides which operation a token is spent on, never how many tokens there are).
--
-- 'routine' is what every scheduled scan and hint enqueues (the default, so existing
-- rows and writers are unchanged); 'urgent' is an erasure's. Columns are only added.
ALTER TABLE retention.operations ADD COLUMN IF NOT EXISTS priority text NOT NULL DEFAULT 'routine'
    CHECK (priority IN ('urgent', 'routine'));

-- The claim's order, (priority <> 'urgent', due column): urgent (false) sorts first. These
-- partial indexes make the claim an ordered index scan that stops after n rows, as the
-- ones of migration 0002 did before the order had a priority; those are dropped, as no
-- statement's order matches them any more.
CREATE INDEX IF NOT EXISTS operations_pending_by_priority
    ON retention.operations (policy, (priority <> 'urgent'), not_before) WHERE state = 'pending';
CREATE INDEX IF NOT EXISTS operations_window_pending_by_priority
    ON retention.operations (window_key, (priority <> 'urgent'), not_before)
    WHERE state = 'pending';
DROP INDEX IF EXISTS retention.operations_pending;
DROP INDEX IF EXISTS retention.operations_window_pending;
