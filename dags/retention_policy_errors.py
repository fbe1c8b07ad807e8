"""Airflow DAG-import check for the retention policies file.

Valid policies get their DAGs from `retention_policies.py`; this file only
raises, so that a bad policy shows as an import error in the Airflow UI
(naming the policy and the field) without hiding the DAGs of the good ones.
"""

from __future__ import annotations

from retention.policy import PolicyFileError, load_policies

_report = load_policies().error_report()
if _report:
    raise PolicyFileError(_report)
