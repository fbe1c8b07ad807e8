"""Airflow plugin: the retention HTTP API (signed hints, evidence) on the api-server."""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

from retention.airflow.api import create_app


class RetentionPlugin(AirflowPlugin):
    """Mounts ``/retention/hints`` and ``/retention/operations/{key}``."""

    name = "retention"
    fastapi_apps = [  # noqa: RUF012 - the attribute Airflow reads
        {"app": create_app(), "url_prefix": "/retention", "name": "Retention hints and evidence"}
    ]
