"""Development tools outside the shipped package: the demo's, the benchmarks' and the tests'.

A real sandbox deletion API, a webhook receiver, data seeding, plan requests over
a fixed cutoff and Airflow's own processes. ``scripts/`` and ``tests/`` both
import them from here, so that the scripts need nothing from ``tests`` (a unit
test keeps it so). Nothing in ``plugins/retention`` imports them.
"""
