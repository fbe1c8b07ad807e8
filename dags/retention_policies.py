"""One retention DAG per valid policy: ``retention__<name>`` (see the DAG docs of each).

Policies come from ``include/retention_policies.yaml`` (or ``$RETENTION_POLICIES``);
the DAGs are built by ``retention.airflow.dag_factory``. Bad policies, and
policies whose DAG cannot be built, are reported by ``retention_policy_errors.py``.
"""

from __future__ import annotations

from retention.airflow.dag_factory import build_policy_dags
from retention.policy import load_policies

_dags, _ = build_policy_dags(load_policies())
globals().update(_dags)
