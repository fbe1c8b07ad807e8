"""The Airflow-facing layer: the only part of the package that imports Airflow.

``connections`` (hooks → plain connections and HTTP senders), ``steps`` (the
work of each task, from plain values), ``dag_factory`` (one DAG per policy: its
tasks and their wiring), ``dag_docs`` (the DAG docs and the DAG steps of docs/runs.md,
from one list), ``non_retryable`` (errors that fail a task without a retry),
``api`` (the plugin's JSON API), ``access`` (what the web layer asks Airflow:
logins, permissions, paused flags, starting a replay) and ``lookup`` (the web
layer's reads, one answer policy for the JSON API and the Retention view).
Everything below takes connections and plain values, so its tests run without an
Airflow home.
"""
