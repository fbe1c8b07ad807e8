-- Whether a partition of a timestamp (without time zone) or date key holds a row
-- that the row deletes would keep: one whose value, read in the transaction's time
-- zone as the deletes read it, is at or after the cutoff. Near a DST gap a value
-- below the partition's upper bound can read as later than the bound. Only values
-- from the cutoff minus twice the zone's largest offset change on can read as at or
-- after the cutoff, so only that index range is read; the cast makes the comparison
-- row by row (no index order is assumed across the gap). Read-only.
SELECT EXISTS (
    SELECT 1 FROM {partition}
    WHERE {ts} >= (%(cutoff)s::timestamptz - make_interval(secs => 2 * %(gap_seconds)s))::{ts_type}
      AND {ts}::timestamptz >= %(cutoff)s::timestamptz
) AS young
