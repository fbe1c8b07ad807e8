-- Disable a policy's event receiver (it answered 410 Gone); events stay pending.
INSERT INTO retention.notify_endpoints (policy, disabled_at, reason)
VALUES (%(policy)s, now(), %(reason)s)
ON CONFLICT (policy) DO UPDATE SET disabled_at = now(), reason = excluded.reason
