-- The largest change of a time zone's UTC offset, in seconds, as this server's time
-- zone data has it (the deletes convert with the same data): the zone's offsets at
-- each midnight UTC from 1900 to 2100, each compared with the day before. Reads
-- nothing but the time zone data (about 73,000 computed rows, a fraction of a second).
SELECT coalesce(max(abs(extract(epoch FROM s.off - s.prev))), 0)::float8 AS seconds
FROM (
    SELECT o.off, lag(o.off) OVER (ORDER BY t) AS prev
    FROM generate_series(
        timestamptz '1900-01-01 00:00:00+00', timestamptz '2100-01-01 00:00:00+00', interval '1 day'
    ) AS t
    CROSS JOIN LATERAL (SELECT (t AT TIME ZONE %(zone)s) - (t AT TIME ZONE 'UTC') AS off) AS o
) AS s
