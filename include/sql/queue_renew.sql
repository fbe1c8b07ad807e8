-- Leased queue: extend the leases a worker still holds and returns the ids it
-- still holds; an id missing from the answer was reclaimed by someone else after
-- its lease expired, and the worker must stop working it. Touches the named rows.
UPDATE {table}
SET lease_expires_at = now() + make_interval(secs => %(lease_seconds)s), updated_at = now()
WHERE {id} = ANY(%(ids)s) AND lease_owner = %(owner)s AND state = 'in_flight'
RETURNING {id} AS job_id
