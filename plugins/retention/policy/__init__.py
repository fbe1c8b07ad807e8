"""Retention policies: the model, the loader and the JSON Schema.

Pure configuration: nothing here touches a database, the network or Airflow.
"""

from retention.policy.loader import (
    PolicyFileError,
    PolicyProblem,
    PolicySet,
    load_policies,
    parse_policy,
    policies_path,
)
from retention.policy.model import (
    HealthSpec,
    NotifySpec,
    Policy,
    RemoteSpec,
    TableSpec,
    Timeouts,
)

__all__ = [
    "HealthSpec",
    "NotifySpec",
    "Policy",
    "PolicyFileError",
    "PolicyProblem",
    "PolicySet",
    "RemoteSpec",
    "TableSpec",
    "Timeouts",
    "load_policies",
    "parse_policy",
    "policies_path",
]
