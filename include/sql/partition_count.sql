-- Count a partition's rows when the statistics have no figure for it (never
-- analysed). Read-only; bounded by the policy's plan_statement_timeout_ms.
SELECT count(*) AS n FROM {partition}
