-- Which of the hinted object ids name a row of the policy's table. Read-only.
SELECT DISTINCT {object_id}::text AS object_id
FROM {table}
WHERE {object_id}::text = ANY(%(keys)s::text[])
