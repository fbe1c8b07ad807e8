"""Every SQL file's name starts with one declared prefix, one per subject (``SQL_PREFIXES``),
so the files about one table sort together and a second spelling of a subject
(``windows_`` beside ``window_``, ``operations_`` beside ``ops_``) fails here."""

from __future__ import annotations

import re

from retention.db.sqlfiles import SQL_PREFIXES, migration_files
from retention.paths import SQL_DIR

NAMES = sorted(path.stem for path in SQL_DIR.glob("*.sql"))
CREATED = re.compile(
    r"CREATE\s+(?:OR\s+REPLACE\s+)?(?:TABLE|VIEW)\s+(?:IF\s+NOT\s+EXISTS\s+)?retention\.(\w+)",
    re.IGNORECASE,
)


def prefix_of(name: str) -> str | None:
    """The longest declared prefix ``name`` starts with (``run_lease`` before ``run``)."""
    found = [prefix for prefix in SQL_PREFIXES if name == prefix or name.startswith(f"{prefix}_")]
    return max(found, key=len, default=None)


def second_spellings() -> set[str]:
    """Prefixes a file must not start with: each declared prefix in the plural (or the
    singular), and each table of the schema that is not itself a declared prefix."""
    tables = {table for path in migration_files() for table in CREATED.findall(path.read_text())}
    plurals = {f"{prefix}s" for prefix in SQL_PREFIXES}
    singulars = {prefix.removesuffix("s") for prefix in SQL_PREFIXES}
    return (tables | plurals | singulars) - set(SQL_PREFIXES)


def test_every_sql_file_starts_with_a_declared_prefix() -> None:
    undeclared = [name for name in NAMES if prefix_of(name) is None]
    assert undeclared == [], "name the file after its subject's prefix in SQL_PREFIXES"


def test_no_sql_file_spells_a_subject_a_second_way() -> None:
    wrong = sorted(
        f"{name}.sql starts with {spelling}_"
        for name in NAMES
        for spelling in second_spellings()
        if name == spelling or name.startswith(f"{spelling}_")
    )
    assert wrong == [], "one prefix per table: use the one SQL_PREFIXES declares"


def test_the_schema_tables_are_seen() -> None:
    """The second-spelling rule reads the migrations; it must find the tables it guards."""
    assert {"windows", "runs", "run_leases", "operations", "partition_drops"} <= second_spellings()


def test_every_declared_prefix_names_a_file() -> None:
    assert set(SQL_PREFIXES) - {prefix_of(name) for name in NAMES} == set()
