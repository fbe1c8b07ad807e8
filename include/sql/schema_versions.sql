-- The migrations applied to the retention schema, in order, for the schema
-- snapshot's header. Read-only.
SELECT version FROM retention.schema_migrations ORDER BY version COLLATE "C"
