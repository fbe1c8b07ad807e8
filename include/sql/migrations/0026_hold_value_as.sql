-- Migration 0026: a hold's value read through the type of a column of a table.
--
-- A hold of one policy is stored as its table's column reads it (tenant "042" of an
-- integer column is "42"); a hold of every policy is stored as given, since the
-- policies' columns may have different types. The held-row predicate
-- (hold_row_held.sql) compared the row's column, as text, with the stored text, so an
-- every-policy tenant hold "042" kept no row of an integer column's tenant 42.
-- retention.hold_value_as reads the value through the column's type (the type's input
-- function, via json_populate_record; the column is quoted with %I, no type name is
-- composed) and returns that type's text: "042" of an integer column is "42", an
-- upper-case uuid its lower-case text. A value the type refuses (22xxx) is NULL, which
-- matches no row. p_sample is a NULL of the table's row type (NULL::schema.table): the
-- predicate calls this once per active hold in an uncorrelated subquery, never per row.
CREATE OR REPLACE FUNCTION retention.hold_value_as(
    p_sample anyelement,
    p_column text,
    p_value text
) RETURNS text LANGUAGE plpgsql STABLE AS $fn$
DECLARE
    typed text;
BEGIN
    EXECUTE format(
        'SELECT (json_populate_record($1, json_build_object($2::text, $3::text))).%I::text',
        p_column)
        INTO typed USING p_sample, p_column, p_value;
    RETURN typed;
EXCEPTION WHEN data_exception THEN
    RETURN NULL;
END
$fn$;
