-- Distinct non-null tenants, by a loose index scan (recursive CTE) that jumps
-- from one tenant to the next through an index on the tenant column instead
-- of reading every row. Read-only; stops after max_tenants + 1 tenants.
WITH RECURSIVE tenants AS (
    (SELECT {tenant} AS tenant, 1 AS n
     FROM {table}
     WHERE {tenant} IS NOT NULL
     ORDER BY {tenant}
     LIMIT 1)
    UNION ALL
    SELECT (SELECT {tenant}
            FROM {table}
            WHERE {tenant} > tenants.tenant
            ORDER BY {tenant}
            LIMIT 1),
           tenants.n + 1
    FROM tenants
    WHERE tenants.tenant IS NOT NULL AND tenants.n <= %(max_tenants)s
)
SELECT tenant FROM tenants WHERE tenant IS NOT NULL
