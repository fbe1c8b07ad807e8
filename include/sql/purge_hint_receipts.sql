-- Purge one bounded batch of hint receipts older than the audit horizon (they only
-- guard against replays, which the 5-minute signature tolerance already bounds).
WITH doomed AS (
    SELECT webhook_id FROM retention.hint_receipts
    WHERE policy = %(policy)s AND received_at < %(horizon)s
    LIMIT %(batch_rows)s
)
DELETE FROM retention.hint_receipts WHERE webhook_id IN (SELECT webhook_id FROM doomed)
