-- A fragment, not a statement: TRUE when a row of a partition has a tenant an active hold
-- names. One probe per held value (held_tenants, text, each one the column's type
-- accepts, checked by hold_typed_value.sql), read through the column's own type
-- (json_populate_record applies the type's input function; no type name is composed),
-- so each probe is an equality on the column itself, which its index serves; LATERAL
-- with LIMIT 1 keeps it a lookup per value rather than one pass over the partition.
EXISTS (
    SELECT 1
    FROM unnest(%(held_tenants)s::text[]) AS held(value)
    CROSS JOIN LATERAL (
        SELECT 1 FROM {partition} AS p
        WHERE p.{tenant} = (json_populate_record(
                                NULL::{partition},
                                json_build_object(%(tenant_column)s::text, held.value))).{tenant}
        LIMIT 1) AS hit)
