-- Whether this policy ever recorded a detach of the table with this oid: a pending
-- detach is finished (FINALIZE, skipping the checks of rules 2 and 3) only when this
-- package began it. Reads the evidence only.
SELECT EXISTS (
    SELECT 1
    FROM retention.partition_drops
    WHERE policy = %(policy)s AND table_oid = %(oid)s::oid AND action IN ('drop', 'detach')
) AS ours
