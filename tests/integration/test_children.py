"""Child tables go with their parents in the same batch transaction, deepest first, and a
foreign key nobody accounted for stops the run before anything is deleted."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from airflow.sdk.exceptions import AirflowFailException
from psycopg import sql

from devtools.plans import request
from retention import metrics
from retention.airflow.dag_factory import build_dag
from retention.db.connection import Connection, connect_dsn
from retention.evidence.reconcile import reconcile_run
from retention.metrics import segment
from retention.rows.children import CoupledTableError, check_coupled_tables, count_orphans
from retention.rows.deleter import BatchSizer, delete_window
from retention.rows.planner import plan_windows
from tests.support.children import PARENTS, create_family, family_children
from tests.support.policies import make_policy
from tests.support.stats_sink import RecordingSink
from tests.support.tables import create_table, ids_left, new, old


@pytest.fixture
def sink(monkeypatch: pytest.MonkeyPatch) -> Iterator[RecordingSink]:
    """What retention.metrics sends during the test, kept in order (both name forms)."""
    monkeypatch.delenv(metrics.NAMES_VARIABLE, raising=False)
    before = metrics.installed()
    recording = RecordingSink()
    metrics.install(recording)
    yield recording
    metrics.install(before)


def _orphans_at_every_level(db: Connection, name: str) -> list[int]:
    """Child rows whose parent is gone, at each level (no constraint guards the last)."""
    counts = []
    for child, column, parent in (
        (f"{name}_r", "asset_id", name),
        (f"{name}_c", "rendition_id", f"{name}_r"),
        (f"{name}_p", "chunk_id", f"{name}_c"),
    ):
        row = db.execute(
            sql.SQL(
                "SELECT count(*) AS n FROM {c} AS x WHERE NOT EXISTS "
                "(SELECT 1 FROM {p} AS y WHERE y.id = x.{col})"
            ).format(
                c=sql.Identifier("public", child),
                p=sql.Identifier("public", parent),
                col=sql.Identifier(column),
            )
        ).fetchone()
        counts.append(row["n"])
    return counts


def _count(db: Connection, table: str) -> int:
    row = db.execute(
        sql.SQL("SELECT count(*) AS n FROM {}").format(sql.Identifier("public", table))
    ).fetchone()
    return row["n"]


def test_three_levels_of_children_go_with_their_parents_in_one_transaction_per_batch(
    db: Connection, unique_name: str
) -> None:
    create_family(db, unique_name)
    policy = make_policy(
        unique_name, window_rows=1000, batch_rows=7, children=family_children(unique_name)
    )
    coupling = check_coupled_tables(db, policy)
    assert [(link.table, link.depth, link.parent_column) for link in coupling.links] == [
        (f"public.{unique_name}_r", 1, "id"),
        (f"public.{unique_name}_c", 2, "id"),
        (f"public.{unique_name}_p", 3, "id"),
    ]
    batches = 0
    by_table: dict[str, int] = {}
    for window in plan_windows(db, request(policy)):
        result = delete_window(db, policy, window, batch_rows=7, dry_run=False)
        batches += result.batches
        for table, rows in result.rows_by_table.items():
            by_table[table] = by_table.get(table, 0) + rows
    assert ids_left(db, unique_name) == list(range(2, PARENTS + 1, 2))
    assert _orphans_at_every_level(db, unique_name) == [0, 0, 0]
    young = PARENTS // 2
    assert [_count(db, f"{unique_name}_{s}") for s in "rcp"] == [young * 2, young * 4, young * 8]
    assert by_table == {
        f"public.{unique_name}": 30,
        f"public.{unique_name}_r": 60,
        f"public.{unique_name}_c": 120,
        f"public.{unique_name}_p": 240,
    }
    xids = db.execute(
        sql.SQL("SELECT xid, array_agg(DISTINCT tbl) AS tables FROM {} GROUP BY xid").format(
            sql.Identifier("public", f"{unique_name}_log")
        )
    ).fetchall()
    assert len(xids) == batches, "every batch is one transaction, children included"
    assert all(len(row["tables"]) == 4 for row in xids), "each batch deletes at every level"
    assert count_orphans(db, policy) == {}


def test_a_parent_with_many_children_shrinks_its_batch(
    db: Connection, unique_name: str, sink: RecordingSink
) -> None:
    """A parent with 10,000 children in the first batch: that transaction is timed with
    its children, so it runs past the target and the next batch is smaller than the first;
    every later size is the sizer's decision on the measured time of the batch before it
    (which holds on a slow machine and a fast one alike)."""
    parents, heavy, start = 100, 10_000, 20
    create_table(db, unique_name, [(i, 1, old()) for i in range(1, parents + 1)])
    names = {
        "t": sql.Identifier("public", unique_name),
        "r": sql.Identifier("public", f"{unique_name}_r"),
    }
    for statement in (
        "CREATE TABLE {r} (id bigserial PRIMARY KEY, asset_id bigint NOT NULL REFERENCES {t})",
        "CREATE INDEX ON {r} (asset_id)",
        "INSERT INTO {r} (asset_id) SELECT 1 FROM generate_series(1, %(heavy)s)",
        "INSERT INTO {r} (asset_id) SELECT t.id FROM {t} AS t, generate_series(1, 2) "
        "WHERE t.id > 1",
    ):
        db.execute(sql.SQL(statement).format(**names), {"heavy": heavy})
    policy = make_policy(
        unique_name,
        window_rows=1000,
        batch_rows=start,
        target_batch_ms=5,
        children=[{"table": f"{unique_name}_r", "foreign_key": "asset_id"}],
        health={"busy_sleep_ratio": 0},
    )
    (window,) = plan_windows(db, request(policy))
    result = delete_window(db, policy, window, batch_rows=start, dry_run=False)

    def per_batch(table: str) -> list[int]:
        tag = segment(f"public.{table}")
        return [
            value
            for _, stat, value, tags in sink.sent
            if stat == "retention.rows_deleted" and tags and tags["table"] == tag
        ]

    sizes, children = per_batch(unique_name), per_batch(f"{unique_name}_r")
    assert len(sizes) == len(result.batch_ms) == result.batches
    assert (sizes[0], children[0]) == (start, heavy + 2 * (start - 1)), "the heavy batch"
    assert result.batch_ms[0] > policy.target_batch_ms, "timed with its 10,000 children"
    assert sizes[1] < start, "the batch after the heavy one shrank"
    sizer, decided = BatchSizer(start=start, timing=policy.batch_timing), []
    for ms, size in zip(result.batch_ms, sizes, strict=True):
        decided.append(sizer.size)
        sizer.succeeded(ms, size)  # every key of the window is eligible: keys == rows
    assert sizes[:-1] == decided[:-1], (sizes, result.batch_ms)
    assert sizes[-1] <= decided[-1], "the window's last batch takes the keys left"
    assert sum(sizes) == result.rows_deleted == parents
    assert sum(children) == heavy + 2 * (parents - 1)
    assert ids_left(db, unique_name) == []
    assert _count(db, f"{unique_name}_r") == 0


def test_an_unlisted_foreign_key_without_cascade_fails_the_plan_before_any_delete(
    db: Connection, unique_name: str
) -> None:
    create_family(db, unique_name)
    policy = make_policy(unique_name, window_rows=1000, batch_rows=7)  # no children listed
    with pytest.raises(CoupledTableError) as failed:
        plan_windows(db, request(policy))
    message = str(failed.value)
    assert f"{unique_name}_r_fk" in message
    assert f"referencing table public.{unique_name}_r, column asset_id" in message
    for way in ("children:", "ON DELETE CASCADE or SET NULL", "ignore_foreign_keys:"):
        assert way in message
    assert len(ids_left(db, unique_name)) == PARENTS, "nothing was deleted"
    ignoring = make_policy(
        unique_name,
        ignore_foreign_keys=[{"constraint": f"{unique_name}_r_fk", "reason": "kept for audit"}],
    )
    assert check_coupled_tables(db, ignoring).links == []
    assert check_coupled_tables(db, ignoring).warnings() == []
    misspelt = make_policy(
        unique_name,
        ignore_foreign_keys=[
            {"constraint": f"{unique_name}_r_fk", "reason": "audit"},
            {"constraint": "no_such_fk", "reason": "a typo"},
        ],
    )
    (warning,) = check_coupled_tables(db, misspelt).warnings()
    assert "ignore_foreign_keys names 'no_such_fk'" in warning


def test_an_unlisted_cascade_is_a_warning_not_a_failure(db: Connection, unique_name: str) -> None:
    create_table(db, unique_name, [(1, 1, old())])
    db.execute(
        sql.SQL(
            "CREATE TABLE {c} (id bigint PRIMARY KEY, parent bigint "
            "REFERENCES {t} (id) ON DELETE CASCADE)"
        ).format(
            c=sql.Identifier("public", f"{unique_name}_k"), t=sql.Identifier("public", unique_name)
        )
    )
    coupling = check_coupled_tables(db, make_policy(unique_name))
    assert coupling.problems == []
    (warning,) = coupling.warnings()
    assert f"public.{unique_name}_k" in warning
    assert "not listed in children" in warning


def test_an_unlisted_cascade_is_named_in_the_stored_run_summary_and_the_plan_log(
    db: Connection, unique_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The DAG docs are built without a database and cannot name an unlisted cascade:
    each run does, in its plan log and its stored summary's plan_notes."""
    create_family(db, unique_name)
    cascading = sql.Identifier("public", f"{unique_name}_k")
    db.execute(
        sql.SQL(
            "CREATE TABLE {} (id bigint PRIMARY KEY, asset_id bigint CONSTRAINT {} "
            "REFERENCES {} (id) ON DELETE CASCADE)"
        ).format(cascading, sql.Identifier(f"{unique_name}_k_fk"), sql.Identifier(unique_name))
    )
    policy = make_policy(unique_name, children=family_children(unique_name))
    with caplog.at_level("WARNING", logger="retention.rows.planner"):
        windows = plan_windows(db, request(policy, "run-1"))
    for window in windows:
        delete_window(db, policy, window, batch_rows=policy.batch_rows, dry_run=False)
    reconcile_run(db, policy, "run-1")
    stored = db.execute(
        "SELECT summary FROM retention.runs WHERE policy = %s AND run_id = 'run-1'",
        (policy.name,),
    ).fetchone()["summary"]
    (note,) = [n for n in stored["plan_notes"] if f"'{unique_name}_k_fk'" in n]
    assert note.startswith(
        f"foreign key '{unique_name}_k_fk' (public.{unique_name}_k.asset_id → "
        f"public.{unique_name}.id, ON DELETE CASCADE) is not listed in children:"
    )
    assert f"policy {unique_name} plan: {note}" in [r.getMessage() for r in caplog.records]


def test_orphans_of_a_child_without_a_constraint_are_counted(
    db: Connection, unique_name: str
) -> None:
    create_family(db, unique_name)
    policy = make_policy(unique_name, children=family_children(unique_name))
    assert count_orphans(db, policy) == {}
    db.execute(
        sql.SQL("DELETE FROM {} WHERE id <= 3").format(sql.Identifier("public", f"{unique_name}_c"))
    )  # behind retention's back: the last level has no constraint to stop it
    assert count_orphans(db, policy) == {f"public.{unique_name}_p": 6}


def test_the_first_task_fails_without_a_retry_on_an_unaccounted_foreign_key(
    db: Connection, unique_name: str
) -> None:
    create_family(db, unique_name)
    policy = make_policy(unique_name)
    (first,) = [t for t in build_dag(policy, auto_register=False).tasks if not t.upstream_task_ids]
    with pytest.raises(AirflowFailException) as refused:
        first.python_callable()
    assert first.task_id == "migrate_schema"
    assert isinstance(refused.value.__cause__, CoupledTableError)
    assert f"{unique_name}_r_fk" in str(refused.value)
    assert len(ids_left(db, unique_name)) == PARENTS


def test_a_listed_child_that_does_not_exist_is_named(db: Connection, unique_name: str) -> None:
    create_table(db, unique_name, [(1, 1, old())])
    policy = make_policy(unique_name, children=[{"table": "no_such_child", "foreign_key": "x"}])
    with pytest.raises(CoupledTableError, match=r"table public\.no_such_child does not exist"):
        check_coupled_tables(db, policy)


def test_a_references_column_that_is_not_unique_alone_is_refused(
    db: Connection, unique_name: str
) -> None:
    """A code unique only per tenant: a child row holding it could belong to another
    tenant's parent, so deleting by it would take that parent's children too."""
    create_table(db, unique_name, [(1, 1, old()), (2, 2, old())])
    parent = sql.Identifier("public", unique_name)
    child = sql.Identifier("public", f"{unique_name}_x")
    db.execute(sql.SQL("ALTER TABLE {} ADD COLUMN code text").format(parent))
    db.execute(sql.SQL("UPDATE {} SET code = 'same'").format(parent))
    db.execute(sql.SQL("CREATE UNIQUE INDEX ON {} (tenant_id, code)").format(parent))
    db.execute(sql.SQL("CREATE TABLE {} (id bigint PRIMARY KEY, code text)").format(child))
    policy = make_policy(
        unique_name,
        children=[{"table": f"{unique_name}_x", "foreign_key": "code", "references": "code"}],
    )
    with pytest.raises(CoupledTableError, match=r"references: code, but .* is not unique"):
        check_coupled_tables(db, policy)
    db.execute(sql.SQL("CREATE UNIQUE INDEX ON {} (code) WHERE tenant_id = 1").format(parent))
    with pytest.raises(CoupledTableError, match="is not unique"):  # partial: not unique
        check_coupled_tables(db, policy)
    db.execute(sql.SQL("UPDATE {} SET code = 'c' || id").format(parent))
    db.execute(sql.SQL("CREATE UNIQUE INDEX ON {} (code)").format(parent))
    (link,) = check_coupled_tables(db, policy).links
    assert link.parent_column == "code"


def test_a_foreign_key_behind_an_unlisted_cascade_is_followed(
    db: Connection, unique_name: str
) -> None:
    """policy ← X (ON DELETE CASCADE, unlisted) ← Y (NO ACTION): the cascade deletes rows
    of X, which Y refuses, so Y must be accounted for like a direct reference."""
    create_table(db, unique_name, [(1, 1, old())])
    x = sql.Identifier("public", f"{unique_name}_x")
    y = sql.Identifier("public", f"{unique_name}_y")
    db.execute(
        sql.SQL(
            "CREATE TABLE {} (id bigint PRIMARY KEY, parent bigint REFERENCES {} ON DELETE CASCADE)"
        ).format(x, sql.Identifier("public", unique_name))
    )
    db.execute(
        sql.SQL(
            "CREATE TABLE {} (id bigint PRIMARY KEY, x_id bigint CONSTRAINT {} REFERENCES {} (id))"
        ).format(y, sql.Identifier(f"{unique_name}_y_fk"), x)
    )
    with pytest.raises(CoupledTableError) as failed:
        check_coupled_tables(db, make_policy(unique_name))
    assert f"'{unique_name}_y_fk'" in str(failed.value)
    assert f"reached through the ON DELETE CASCADE of '{unique_name}_x_parent_fkey'" in str(
        failed.value
    )


def test_an_orphan_count_that_times_out_is_named_not_fatal(
    db: Connection, unique_name: str, test_dsn: str
) -> None:
    """The anti-join on a large (here: locked) child table runs out of time: reconcile
    still finishes, names the table as not counted, and is not dirty for it."""
    create_family(db, unique_name)
    policy = make_policy(unique_name, children=family_children(unique_name))
    for window in plan_windows(db, request(policy, "run-1")):
        delete_window(db, policy, window, batch_rows=policy.batch_rows, dry_run=False)
    with connect_dsn(test_dsn) as locker, locker.transaction():
        locker.execute(
            sql.SQL("LOCK TABLE {} IN ACCESS EXCLUSIVE MODE").format(
                sql.Identifier("public", f"{unique_name}_p")
            )
        )
        summary = reconcile_run(db, policy, "run-1")
    assert summary["orphans_not_counted"] == [f"public.{unique_name}_p"]
    assert summary["orphans"] == {}
    assert summary["status"] == "clean"


def test_a_composite_or_deeper_foreign_key_gets_a_resolution_that_fits_it(
    db: Connection, unique_name: str
) -> None:
    """A listed child whose constraint is composite ((tenant_id, asset_id) → (tenant_id,
    id)) cannot be matched by one foreign_key column: the message says so instead of
    suggesting foreign_key: tenant_id. A key referencing a listed child is to be listed
    under that child's children:."""
    create_table(db, unique_name, [(1, 1, old())])
    parent = sql.Identifier("public", unique_name)
    child = sql.Identifier("public", f"{unique_name}_r")
    grandchild = sql.Identifier("public", f"{unique_name}_g")
    db.execute(sql.SQL("CREATE UNIQUE INDEX ON {} (tenant_id, id)").format(parent))
    db.execute(
        sql.SQL(
            "CREATE TABLE {} (id bigint PRIMARY KEY, tenant_id integer, asset_id bigint, "
            "FOREIGN KEY (tenant_id, asset_id) REFERENCES {} (tenant_id, id))"
        ).format(child, parent)
    )
    db.execute(
        sql.SQL("CREATE TABLE {} (id bigint PRIMARY KEY, r_id bigint REFERENCES {} (id))").format(
            grandchild, child
        )
    )
    policy = make_policy(
        unique_name, children=[{"table": f"{unique_name}_r", "foreign_key": "asset_id"}]
    )
    with pytest.raises(CoupledTableError) as failed:
        check_coupled_tables(db, policy)
    message = str(failed.value)
    assert "It is a composite key (tenant_id, asset_id → tenant_id, id)" in message
    assert "foreign_key: tenant_id" not in message
    assert (
        f"list public.{unique_name}_g in the children: of the listed child "
        f"public.{unique_name}_r (foreign_key: r_id)"
    ) in message


def test_children_by_a_references_column_in_per_tenant_windows(
    db: Connection, unique_name: str
) -> None:
    """A grandchild without a constraint references its parent's code (unique, not the
    primary key, and no key's value), and the windows are one per tenant: each window
    takes its own tenant's rows and, by code, exactly their descendants."""
    rows = [(i, 1 + i % 3, old() if i % 2 else new()) for i in range(1, 31)]
    create_table(db, unique_name, rows)
    ident = sql.Identifier
    names = {
        "t": ident("public", unique_name),
        "r": ident("public", f"{unique_name}_r"),
        "g": ident("public", f"{unique_name}_g"),
    }
    for statement in (
        "CREATE TABLE {r} (id bigserial PRIMARY KEY, asset_id bigint NOT NULL REFERENCES {t}, "
        "code text NOT NULL UNIQUE)",
        "CREATE TABLE {g} (id bigserial PRIMARY KEY, r_code text NOT NULL)",
        "INSERT INTO {r} (asset_id, code) SELECT t.id, 'code-' || t.id || '-' || n "
        "FROM {t} AS t, generate_series(1, 2) AS n",
        "INSERT INTO {g} (r_code) SELECT r.code FROM {r} AS r, generate_series(1, 3)",
    ):
        db.execute(sql.SQL(statement).format(**names))
    policy = make_policy(
        unique_name,
        window_rows=1000,
        batch_rows=4,
        window_per_tenant=True,
        children=[
            {
                "table": f"{unique_name}_r",
                "foreign_key": "asset_id",
                "children": [
                    {"table": f"{unique_name}_g", "foreign_key": "r_code", "references": "code"}
                ],
            }
        ],
    )
    (_, grandchild) = check_coupled_tables(db, policy).links
    assert (grandchild.parent_column, grandchild.constraint) == ("code", None)
    windows = plan_windows(db, request(policy))
    assert {window.tenant for window in windows} == {"1", "2", "3"}, "a window per tenant"
    for window in windows:
        delete_window(db, policy, window, batch_rows=4, dry_run=False)
    assert ids_left(db, unique_name) == list(range(2, 31, 2))
    left = db.execute(
        sql.SQL(
            "SELECT count(*) AS n, count(*) FILTER (WHERE r.id IS NULL) AS orphans "
            "FROM {g} AS g LEFT JOIN {r} AS r ON r.code = g.r_code"
        ).format(**names)
    ).fetchone()
    assert (left["n"], left["orphans"]) == (15 * 2 * 3, 0)
    assert count_orphans(db, policy) == {}


def children_by_legacy_id(db: Connection, name: str) -> None:
    """<name> with a unique legacy_id (row 1's is 2) and <name>_r whose asset_id has a
    foreign key constraint to <name>.id: one child, of the young row 2; old row 1 has none."""
    create_table(db, name, [(1, 1, old()), (2, 1, new())])
    parent = sql.Identifier("public", name)
    db.execute(sql.SQL("ALTER TABLE {} ADD COLUMN legacy_id bigint UNIQUE").format(parent))
    db.execute(sql.SQL("UPDATE {} SET legacy_id = 3 - id").format(parent))
    db.execute(
        sql.SQL(
            "CREATE TABLE {} (id bigint PRIMARY KEY, asset_id bigint NOT NULL "
            "CONSTRAINT {} REFERENCES {} (id))"
        ).format(sql.Identifier("public", f"{name}_r"), sql.Identifier(f"{name}_r_fk"), parent)
    )
    db.execute(
        sql.SQL("INSERT INTO {} VALUES (20, 2)").format(sql.Identifier("public", f"{name}_r"))
    )


def test_references_that_disagrees_with_the_foreign_key_constraint_is_refused(
    db: Connection, unique_name: str
) -> None:
    """The constraint says a child belongs to the parent whose id it holds: deleting by
    ``references: legacy_id`` instead would take row 2's child with row 1 (whose
    legacy_id is 2) while row 2 lives. Refused before anything is deleted; a references:
    that matches the constraint is accepted."""
    children_by_legacy_id(db, unique_name)
    child = {"table": f"{unique_name}_r", "foreign_key": "asset_id"}
    policy = make_policy(unique_name, children=[{**child, "references": "legacy_id"}])
    with pytest.raises(CoupledTableError) as refused:
        plan_windows(db, request(policy))  # before any delete_window
    assert str(refused.value) == (
        f"policy '{unique_name}', field 'children': child public.{unique_name}_r sets "
        f"references: legacy_id, but its foreign key '{unique_name}_r_fk' "
        f"(public.{unique_name}_r.asset_id → public.{unique_name}.id, ON DELETE NO ACTION) "
        f"references public.{unique_name}.id: the constraint says which parent a row of "
        f"public.{unique_name}_r belongs to, and deleting by legacy_id would take the children "
        "of other, living parents; drop references: (the constraint's column is used) or make "
        "it references: id"
    )
    assert ids_left(db, unique_name) == [1, 2], "nothing was deleted"
    assert _count(db, f"{unique_name}_r") == 1, "the living row's child is still there"
    matching = make_policy(unique_name, children=[{**child, "references": "id"}])
    (link,) = check_coupled_tables(db, matching).links
    assert (link.parent_column, link.constraint) == ("id", f"{unique_name}_r_fk")
