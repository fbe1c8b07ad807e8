-- Distinct non-null tenants, by a loose index scan (recursive CTE) that jumps
-- from one tenant to the next through an index on the tenant column instead
-- of reading every row. Read-only; stops after max_tenants + 1 tenants.
WITH RECURSIVE retention_tenant_walk AS (
    (SELECT {tenant} AS tenant, 1 AS n
     FROM {table}
     WHERE {tenant} IS NOT NULL
     ORDER BY {tenant}
     LIMIT 1)
    UNION ALL
    SELECT (SELECT {tenant}
            FROM {table}
            WHERE {tenant} > retention_tenant_walk.tenant
            ORDER BY {tenant}
            LIMIT 1),
           retention_tenant_walk.n + 1
    FROM retention_tenant_walk
    WHERE retention_tenant_walk.tenant IS NOT NULL
      AND retention_tenant_walk.n <= %(max_tenants)s
)
SELECT tenant FROM retention_tenant_walk WHERE tenant IS NOT NULL
