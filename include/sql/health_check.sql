-- The database's health as the deleters see it, in one round trip (between
-- batches, outside any transaction of ours). Read-only; catalog views only;
-- takes no locks.
-- Seeing other sessions' details needs pg_monitor (or pg_read_all_stats):
-- without it other roles' rows show no state, query, xmin or LSNs, which
-- sees_all_sessions and hidden_sessions report.
SELECT
    -- how far the furthest standby is behind in replay (NULL: no standby, or caught up;
    -- not refreshed while replay is stalled)
    (SELECT max(extract(epoch FROM replay_lag)) FROM pg_stat_replication) AS replica_lag_seconds,
    -- the same in bytes of WAL, which grows while replay is stalled (NULL: no standby
    -- reports a position; on a standby itself there is no current WAL position)
    CASE WHEN NOT pg_is_in_recovery() THEN
        (SELECT max(pg_wal_lsn_diff(pg_current_wal_lsn(), replay_lsn))
         FROM pg_stat_replication)
    END AS replica_lag_bytes,
    -- physical standbys connected now: walsenders attached to no database (a logical
    -- one is) that are not a base backup; pid and datid are shown to every role
    (SELECT count(*)
     FROM pg_stat_replication AS sender
     JOIN pg_stat_activity AS session ON session.pid = sender.pid
     WHERE session.datid IS NULL
       AND sender.state IS DISTINCT FROM 'backup'
    ) AS standbys,
    -- the oldest other transaction of this database holding back vacuum: one with a
    -- snapshot (backend_xmin) or one that has written (backend_xid), idle or not
    oldest.pid AS oldest_xact_pid,
    oldest.age AS oldest_xact_seconds,
    -- a vacuum (autovacuum, or one a person started) working on the target table
    (SELECT min(v.pid)
     FROM pg_stat_progress_vacuum AS v
     WHERE v.relid = to_regclass(format('%%I.%%I', %(schema)s::text, %(table)s::text))
    ) AS autovacuum_pid,
    -- sessions (not ours) waiting on a lock that a retention session holds
    (SELECT count(*)
     FROM pg_stat_activity AS waiting
     WHERE waiting.wait_event_type = 'Lock'
       AND waiting.application_name NOT LIKE 'retention%%'
       AND EXISTS (
           SELECT 1 FROM pg_stat_activity AS holder
           WHERE holder.pid = ANY (pg_blocking_pids(waiting.pid))
             AND holder.application_name LIKE 'retention%%'
       )) AS blocked_sessions,
    -- other clients of this database at work, by application_name: running a statement
    -- now, or finished one within the last second (a busy client flips between the two)
    (SELECT coalesce(jsonb_object_agg(application, clients), jsonb_build_object())
     FROM (SELECT client.application_name AS application, count(*) AS clients
           FROM pg_stat_activity AS client
           WHERE client.backend_type = 'client backend'
             AND client.datid = (SELECT oid FROM pg_database WHERE datname = current_database())
             AND client.application_name <> 'retention'
             AND client.pid <> pg_backend_pid()
             AND (client.state = 'active'
                  OR client.state_change > clock_timestamp() - interval '1 second')
           GROUP BY client.application_name) AS at_work
    ) AS active_applications,
    -- whether this role sees every session's details (superuser, pg_monitor or
    -- pg_read_all_stats), and how many sessions of this database it cannot see now
    current_user AS role,
    pg_has_role('pg_read_all_stats', 'USAGE') AS sees_all_sessions,
    CASE WHEN NOT pg_has_role('pg_read_all_stats', 'USAGE') THEN
        (SELECT count(*)
         FROM pg_stat_activity AS hidden
         WHERE hidden.datid = (SELECT oid FROM pg_database WHERE datname = current_database())
           AND hidden.pid <> pg_backend_pid()
           AND hidden.usesysid IS NOT NULL
           AND NOT pg_has_role(hidden.usesysid, 'USAGE'))
    ELSE 0 END AS hidden_sessions
FROM (SELECT 1) AS one
LEFT JOIN LATERAL (
    SELECT pid, extract(epoch FROM clock_timestamp() - xact_start) AS age
    FROM pg_stat_activity
    WHERE (backend_xmin IS NOT NULL OR backend_xid IS NOT NULL)
      AND datid = (SELECT oid FROM pg_database WHERE datname = current_database())
      AND xact_start IS NOT NULL
      AND backend_type <> 'autovacuum worker'
      AND pid <> pg_backend_pid()
    ORDER BY xact_start
    LIMIT 1
) AS oldest ON TRUE
