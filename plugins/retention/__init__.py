"""Retention cleanup for Apache Airflow 3: policies, planning, deleting, reconciling.

Plain, typed Python with no Airflow import at module level (except :mod:`retention.db`,
which uses the Postgres provider hook), so every piece is testable on its own.
"""
