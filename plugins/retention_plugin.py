"""Airflow plugin: the retention HTTP API (signed hints, evidence) and the Retention view
on the api-server."""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

from retention.airflow.api import create_app

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
    and adds the "Retention" entry to the UI's Browse menu."""

    name = "retention"
    fastapi_apps = [  # noqa: RUF012 - the attribute Airflow reads
        {"app": create_app(), "url_prefix": "/retention", "name": "Retention hints and evidence"}
    ]
    external_views = [RETENTION_VIEW]  # noqa: RUF012 - the attribute Airflow reads
