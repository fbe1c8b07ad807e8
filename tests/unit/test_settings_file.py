"""`airflow_settings.yaml` describes the Astro containers' view; locally every one of its
connections is already an AIRFLOW_CONN_* variable, so `make env` never loads an Astro host."""

from __future__ import annotations

import yaml

from tests.support.env import ROOT

ASTRO_CONNECTIONS = {"retention_target", "media_api", "media_events", "retention_hints"}


def settings() -> dict:
    return yaml.safe_load((ROOT / "airflow_settings.yaml").read_text())["airflow"]


def connections() -> dict[str, dict]:
    return {c["conn_id"]: c for c in settings()["connections"]}


def test_the_target_is_not_astros_metadata_database() -> None:
    target = connections()["retention_target"]
    assert target["conn_type"] == "postgres"
    assert target["conn_schema"] not in ("postgres", "airflow", None), (
        "Astro's metadata database is `postgres`: the policies need a database of their own"
    )


def test_the_services_and_secrets_are_described_for_containers() -> None:
    conns = connections()
    assert set(conns) >= ASTRO_CONNECTIONS
    for conn_id in ("media_api", "media_events"):
        assert conns[conn_id]["conn_host"] == "host.docker.internal", conn_id
    assert conns["media_api"]["conn_port"] == 8765
    assert conns["media_events"]["conn_port"] == 8766
    for conn_id in ("media_events", "retention_hints"):
        assert conns[conn_id]["conn_password"].startswith("whsec_REPLACE"), (
            f"{conn_id}: a placeholder, never a real secret, in a committed file"
        )


def test_every_astro_connection_is_a_local_variable_so_make_env_skips_it() -> None:
    local = (ROOT / "scripts" / "devenv.py").read_text()
    for conn_id in ASTRO_CONNECTIONS:
        assert f'"AIRFLOW_CONN_{conn_id.upper()}"' in local, conn_id
    loader = (ROOT / "scripts" / "load_settings.py").read_text()
    assert 'f"AIRFLOW_CONN_{conn_id.upper()}" in os.environ' in loader


def test_the_pools_stay() -> None:
    pools = {p["pool_name"]: p["pool_slot"] for p in settings()["pools"]}
    assert pools["retention_db"] == 2
    assert pools["media_api"] == 4
