"""Load ``airflow_settings.yaml`` (Astro CLI format) into the local Airflow metadata DB.

Pools are created or updated.  Connections are added only when neither an
``AIRFLOW_CONN_<ID>`` variable nor the metadata DB already defines them, so
the local environment's connections win over the Astro defaults.
"""

from __future__ import annotations

import os
from pathlib import Path

import yaml
from airflow.models.connection import Connection
from airflow.models.pool import Pool
from airflow.models.variable import Variable
from airflow.utils.session import create_session

SETTINGS = Path(__file__).resolve().parent.parent / "airflow_settings.yaml"


def main() -> None:
    settings = (yaml.safe_load(SETTINGS.read_text()) or {}).get("airflow") or {}
    for pool in settings.get("pools") or []:
        Pool.create_or_update_pool(
            name=pool["pool_name"],
            slots=int(pool["pool_slot"]),
            description=pool.get("pool_description") or "",
            include_deferred=False,
        )
        print(f"pool {pool['pool_name']}: {pool['pool_slot']} slots")
    for item in settings.get("connections") or []:
        conn_id = item["conn_id"]
        if f"AIRFLOW_CONN_{conn_id.upper()}" in os.environ:
            continue
        with create_session() as session:
            if session.query(Connection).filter(Connection.conn_id == conn_id).first():
                continue
            session.add(
                Connection(
                    conn_id=conn_id,
                    conn_type=item.get("conn_type"),
                    host=item.get("conn_host"),
                    schema=item.get("conn_schema"),
                    login=item.get("conn_login"),
                    password=item.get("conn_password"),
                    port=item.get("conn_port"),
                    extra=item.get("conn_extra"),
                )
            )
        print(f"connection {conn_id} added")
    for item in settings.get("variables") or []:
        Variable.set(item["variable_name"], item["variable_value"])


if __name__ == "__main__":
    main()
