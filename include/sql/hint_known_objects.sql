-- Which of the hinted object ids name a row of the policy's table, and whether any of
-- those rows is older than the latest cutoff allowed now (now − retain_days): a hint
-- makes an old row's object due sooner, it never shortens retention. Read-only.
SELECT {object_id}::text AS object_id,
       bool_or({ts} < %(cutoff)s) AS old_enough
FROM {table}
WHERE {object_id}::text = ANY(%(keys)s::text[])
GROUP BY 1
