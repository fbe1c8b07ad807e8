"""Postgres plumbing shared by every layer: connections, bounded transactions, SQL files,
and the migrations of the ``retention`` schema. Nothing here knows about Airflow."""
