"""Test tiers: ``unit`` (no database, no Airflow home), ``dag`` (DAG integrity),
``integration`` (real Postgres, real HTTP servers on loopback) and ``e2e``
(``dag.test()`` and the real scheduler). Shared code lives in ``tests/support``."""

pytest_plugins = ["tests.support.workers", "tests.support.fixtures"]
