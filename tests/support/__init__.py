"""Shared test code: policies, tables, fixtures, pages, clusters.

What the demo and the benchmarks use as well (the sandbox API, the webhook
receiver, seeding, plan requests, Airflow's processes) lives in ``devtools``.
"""
