"""Airflow DAG-import check for the retention policies file.

Valid policies get their DAGs from ``retention_policies.py``; this file only
raises, so that a bad policy (or one whose DAG cannot be built) shows as an
import error in the Airflow UI, naming the policy and the field, without
hiding the DAGs of the good ones.
"""

from __future__ import annotations

from retention.airflow.dag_factory import build_policy_dags
from retention.policy import PolicyFileError, load_policies

_loaded = load_policies()
_report = _loaded.error_report(build_policy_dags(_loaded, register=False)[1])
if _report:
    raise PolicyFileError(_report)
