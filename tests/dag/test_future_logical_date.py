"""A logical date in the future deletes nothing: `airflow dags test` fails in `compute_cutoff`.

Airflow 3 accepts any logical date from the trigger form and the REST API. A typo
of 20 days must not move the cutoff 20 days forward and delete rows that are only
10 days old: the run fails before anything is deleted, naming the anchor, its
date and the fix.
"""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
from pathlib import Path

import yaml

from devtools.seed import seed_event_logs
from retention.db.connection import Connection
from tests.support.policies import policy_fields


def test_a_logical_date_20_days_ahead_deletes_nothing_and_says_why(
    db: Connection, unique_name: str, tmp_path: Path
) -> None:
    now = dt.datetime.now(dt.UTC)
    seed_event_logs(db, table=f"public.{unique_name}", rows=600, end=now, days=60, tenants=2)
    before = _fingerprint(db, unique_name)
    young = db.execute(
        f"SELECT count(*) AS n FROM public.{unique_name} "  # noqa: S608
        "WHERE created_at >= now() - interval '30 days' AND created_at < now() - interval '10 days'"
    ).fetchone()["n"]
    assert young > 0, "rows 10 to 30 days old: what a cutoff 20 days ahead would delete"

    policies = tmp_path / "policies.yaml"
    policies.write_text(yaml.safe_dump({"policies": {unique_name: policy_fields(unique_name)}}))
    typo = (now + dt.timedelta(days=20)).date().isoformat()
    done = subprocess.run(
        [
            str(Path(sys.executable).with_name("airflow")),
            "dags",
            "test",
            f"retention__{unique_name}",
            typo,
        ],
        env={**os.environ, "RETENTION_POLICIES": str(policies)},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    out = done.stdout + done.stderr
    assert done.returncode != 0, "the run must fail, not end green"
    assert "which is in the future" in out, out[-4000:]
    assert f"from the logical date {typo}T00:00:00+00:00" in out
    assert "trigger with a logical date that is not in the future, or leave it empty" in out
    assert _fingerprint(db, unique_name) == before, "rows were deleted"
    planned = db.execute(
        "SELECT count(*) AS n FROM retention.windows WHERE policy = %s", (unique_name,)
    ).fetchone()["n"]
    assert planned == 0
    state = db.execute(
        "SELECT status FROM retention.runs WHERE policy = %s", (unique_name,)
    ).fetchone()
    assert state is None or state["status"] != "clean"


def _fingerprint(db: Connection, table: str) -> tuple[int, str]:
    row = db.execute(
        f"SELECT count(*) AS n, md5(string_agg(id::text, ',' ORDER BY id)) AS sum "  # noqa: S608
        f"FROM public.{table}"
    ).fetchone()
    return row["n"], row["sum"]
