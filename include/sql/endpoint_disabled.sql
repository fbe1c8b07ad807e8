-- Whether a policy's event receiver is disabled (it answered 410 Gone). Read-only.
SELECT disabled_at, reason FROM retention.notify_endpoints
WHERE policy = %(policy)s AND disabled_at IS NOT NULL
