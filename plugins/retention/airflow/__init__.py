"""The Airflow-facing layer: the only part of the package that imports Airflow.

``connections`` (hooks → plain connections and HTTP senders), ``steps`` (the
work of each task, from plain values), ``dag_factory`` (one DAG per policy),
``api`` (the plugin's FastAPI app). Everything below takes connections and
plain values, so its tests run without an Airflow home.
"""
