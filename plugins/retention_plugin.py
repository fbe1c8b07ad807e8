"""Airflow plugin: the retention HTTP API (signed hints, evidence), the Retention view and
the replay guard on the api-server."""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

from retention.airflow.replay_guard import ReplayGuard
from retention.ui.app import create_app

# The UI shows the view in an iframe at /plugin/retention (its url_route), framing
# the pages the plugin's app serves at /retention/ui/ under Airflow's own login.
RETENTION_VIEW = {
    "name": "Retention",
    "href": "/retention/ui/",
    "url_route": "retention",
    "destination": "nav",
    "category": "browse",
}


class RetentionPlugin(AirflowPlugin):
    """Mounts ``/retention/hints``, ``/retention/operations/{key}`` and ``/retention/ui/``,
    adds the "Retention" entry to the UI's Browse menu, and guards the creation of
    ``retention__replay`` runs (403 unless the user may trigger the replayed policy's DAG)."""

    name = "retention"
    fastapi_apps = [  # noqa: RUF012 - the attribute Airflow reads
        {"app": create_app(), "url_prefix": "/retention", "name": "Retention hints and evidence"}
    ]
    external_views = [RETENTION_VIEW]  # noqa: RUF012 - the attribute Airflow reads
    fastapi_root_middlewares = [  # noqa: RUF012 - the attribute Airflow reads
        {"middleware": ReplayGuard, "args": [], "kwargs": {}, "name": "Retention replay guard"}
    ]
