"""Retention policies: the typed, validated form of ``include/retention_policies.yaml``.

The file is read at DAG parse time (it is a local file, not a database), so
validation here must be cheap and must never touch a database or the network.
Every problem is reported with the policy name and the field, and one bad
policy never hides the good ones: :func:`load_policies` returns both.
"""

from __future__ import annotations

import datetime as dt
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

PROJECT_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_POLICIES_PATH = PROJECT_ROOT / "include" / "retention_policies.yaml"
DAG_ID_PREFIX = "retention__"
DEFAULT_REMOTE_MAX_LAG_HOURS = 72.0

_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")
_POLICY_NAME = re.compile(r"^[A-Za-z0-9_]{1,200}$")
_CRON_PRESETS = {"@once", "@hourly", "@daily", "@weekly", "@monthly", "@yearly", "@annually"}
_CRON_FIELD = re.compile(r"^[0-9A-Za-z*/,\-?LW#]+$")


class PolicyFileError(ValueError):
    """The policies file as a whole cannot be read (missing, not YAML, wrong shape)."""


@dataclass(frozen=True)
class PolicyProblem:
    """One thing wrong with one field of one policy."""

    policy: str
    field: str
    message: str

    def __str__(self) -> str:
        return f"policy {self.policy!r}, field {self.field!r}: {self.message}"


@dataclass(frozen=True)
class TableName:
    """A validated ``schema.table`` pair (schema defaults to ``public``)."""

    schema: str
    name: str

    def __str__(self) -> str:
        return f"{self.schema}.{self.name}"


@dataclass(frozen=True)
class RemoteSpec:
    """The ``remote:`` section: objects deleted through a rate-limited HTTP API."""

    http_conn_id: str
    endpoint: str
    object_id_column: str
    rate_per_second: float
    burst: int
    limiter_scope: str
    pool: str
    method: str = "DELETE"
    version_column: str | None = None
    idempotency_header: str = "Idempotency-Key"
    max_attempts: int = 8
    request_timeout_seconds: float = 10.0
    claim_batch: int = 10
    task_budget_seconds: float = 600.0
    lease_seconds: float = 0.0
    recovery_seconds: float = 60.0
    auth_failure_limit: int = 5
    backoff_base_seconds: float = 2.0
    backoff_max_seconds: float = 600.0

    @property
    def lease(self) -> float:
        """Leases outlast a request timeout several times over."""
        return self.lease_seconds or max(60.0, 3 * self.request_timeout_seconds)


@dataclass(frozen=True)
class NotifySpec:
    """The ``notify:`` section: signed ``retention.deleted`` events to a webhook receiver.

    The signing secret (``whsec_...``) is the connection's password.
    """

    http_conn_id: str
    endpoint: str
    max_attempts: int = 12
    timeout_seconds: float = 10.0
    backoff_base_seconds: float = 5.0
    backoff_max_seconds: float = 3600.0


@dataclass(frozen=True)
class Policy:
    """One retention policy; field names match the YAML contract exactly."""

    name: str
    schedule: str | None
    start_date: dt.datetime
    retain_days: int
    postgres_conn_id: str
    table: TableName
    key_column: str
    timestamp_column: str
    window_rows: int
    batch_rows: int
    pool: str = "default_pool"
    tenant_column: str | None = None
    window_per_tenant: bool = True
    owner: str = "data-platform"
    tags: tuple[str, ...] = ()
    description: str = ""
    lock_timeout_ms: int = 1000
    statement_timeout_ms: int = 10000
    plan_statement_timeout_ms: int = 120000
    pool_slots: int = 1
    revision: int = 1
    audit_days: int = 400
    max_lag_hours: float | None = None
    remote: RemoteSpec | None = None
    notify: NotifySpec | None = None

    @property
    def dag_id(self) -> str:
        return f"{DAG_ID_PREFIX}{self.name}"


@dataclass
class PolicySet:
    """What a policies file yielded: good policies, and problems with the rest."""

    path: Path
    policies: list[Policy] = field(default_factory=list)
    problems: list[PolicyProblem] = field(default_factory=list)
    file_error: str | None = None

    def error_report(self) -> str:
        """A message for the DAG import error; empty when everything is valid."""
        if self.file_error:
            return f"{self.path}: {self.file_error}"
        if not self.problems:
            return ""
        lines = [f"{self.path}: {len(self.problems)} problem(s) in retention policies:"]
        lines += [f"  - {problem}" for problem in self.problems]
        lines.append("The other policies were loaded; fix these to get their DAGs back.")
        return "\n".join(lines)


_REQUIRED = (
    "schedule",
    "start_date",
    "retain_days",
    "postgres_conn_id",
    "table",
    "key_column",
    "timestamp_column",
    "window_rows",
    "batch_rows",
)
_OPTIONAL = (
    "pool",
    "tenant_column",
    "window_per_tenant",
    "owner",
    "tags",
    "description",
    "lock_timeout_ms",
    "statement_timeout_ms",
    "plan_statement_timeout_ms",
    "pool_slots",
    "revision",
    "audit_days",
    "max_lag_hours",
    "remote",
    "notify",
)
_REMOTE_REQUIRED = (
    "http_conn_id",
    "endpoint",
    "object_id_column",
    "rate_per_second",
    "burst",
    "pool",
)
_REMOTE_OPTIONAL = (
    "method",
    "version_column",
    "idempotency_header",
    "limiter_scope",
    "max_attempts",
    "request_timeout_seconds",
    "claim_batch",
    "task_budget_seconds",
    "lease_seconds",
    "recovery_seconds",
    "auth_failure_limit",
    "backoff_base_seconds",
    "backoff_max_seconds",
)
_METHODS = {"DELETE", "POST", "PUT", "PATCH"}
_ENDPOINT_FIELDS = {"object_id", "tenant_id"}
_HEADER = re.compile(r"^[A-Za-z0-9-]{1,100}$")


def policies_path() -> Path:
    """The policies file: ``$RETENTION_POLICIES`` or ``include/retention_policies.yaml``."""
    override = os.environ.get("RETENTION_POLICIES")
    return Path(override) if override else DEFAULT_POLICIES_PATH


def load_policies(path: Path | None = None) -> PolicySet:
    """Read and validate every policy in ``path``; never raises for content problems."""
    path = path or policies_path()
    result = PolicySet(path=path)
    try:
        document = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        result.file_error = "file not found (set RETENTION_POLICIES or create it)"
        return result
    except yaml.YAMLError as exc:
        result.file_error = f"not valid YAML: {exc}"
        return result
    if not isinstance(document, dict) or not isinstance(document.get("policies"), dict):
        result.file_error = "expected a mapping with a 'policies:' mapping of name -> policy"
        return result
    unknown_top = set(document) - {"policies"}
    if unknown_top:
        result.file_error = f"unknown top-level key(s): {', '.join(sorted(unknown_top))}"
        return result
    for name, raw in document["policies"].items():
        policy, problems = parse_policy(str(name), raw)
        result.problems.extend(problems)
        if policy is not None:
            result.policies.append(policy)
    return result


def parse_policy(name: str, raw: Any) -> tuple[Policy | None, list[PolicyProblem]]:
    """Validate one policy mapping; return the policy or the list of problems."""
    problems: list[PolicyProblem] = []

    def problem(field_name: str, message: str) -> None:
        problems.append(PolicyProblem(name, field_name, message))

    if not _POLICY_NAME.match(name):
        problem("name", "use letters, digits and underscores only (it becomes the DAG id)")
    if not isinstance(raw, dict):
        problem("*", "a policy must be a mapping of fields")
        return None, problems
    for key in sorted(set(raw) - set(_REQUIRED) - set(_OPTIONAL)):
        problem(key, f"unknown field; known fields are {', '.join(_REQUIRED + _OPTIONAL)}")
    for key in _REQUIRED:
        if key not in raw:
            problem(key, "required field is missing")
    if problems:
        return None, problems

    values: dict[str, Any] = {"name": name}
    values["schedule"] = _schedule(raw["schedule"], problem)
    values["start_date"] = _start_date(raw["start_date"], problem)
    for key in ("retain_days", "window_rows", "batch_rows"):
        values[key] = _positive_int(key, raw[key], problem)
    for key, default in (
        ("lock_timeout_ms", 1000),
        ("statement_timeout_ms", 10000),
        ("plan_statement_timeout_ms", 120000),
        ("pool_slots", 1),
        ("revision", 1),
        ("audit_days", 400),
    ):
        values[key] = _positive_int(key, raw.get(key, default), problem)
    if raw.get("max_lag_hours") is not None:
        values["max_lag_hours"] = _positive_number("max_lag_hours", raw["max_lag_hours"], problem)
    elif "remote" in raw:
        # Dead operations explain a row, but not forever: a remote policy always has a limit.
        values["max_lag_hours"] = DEFAULT_REMOTE_MAX_LAG_HOURS
    if "remote" in raw:
        values["remote"] = _remote(raw["remote"], raw.get("tenant_column"), problem)
    if "notify" in raw:
        if "remote" not in raw:
            problem("notify", "events announce remote deletions: it needs a remote section")
        values["notify"] = _notify(raw["notify"], problem)
    for key in ("postgres_conn_id", "pool", "owner"):
        if key in raw and (not isinstance(raw[key], str) or not raw[key].strip()):
            problem(key, "must be a non-empty string")
        elif key in raw:
            values[key] = raw[key]
    values["table"] = _table(raw["table"], problem)
    for key in ("key_column", "timestamp_column", "tenant_column"):
        if key in raw and raw[key] is not None:
            values[key] = _identifier(key, raw[key], problem)
    if "window_per_tenant" in raw:
        if not isinstance(raw["window_per_tenant"], bool):
            problem("window_per_tenant", "must be true or false")
        else:
            values["window_per_tenant"] = raw["window_per_tenant"]
    tags = raw.get("tags", [])
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        problem("tags", "must be a list of strings")
    else:
        values["tags"] = tuple(tags)
    if "description" in raw:
        values["description"] = str(raw["description"])
    if (
        isinstance(values.get("batch_rows"), int)
        and isinstance(values.get("window_rows"), int)
        and values["batch_rows"] > values["window_rows"]
    ):
        problem(
            "batch_rows",
            f"{values['batch_rows']} is larger than window_rows ({values['window_rows']}); "
            "a delete batch must fit inside one window",
        )
    if problems:
        return None, problems
    return Policy(**values), problems


def _schedule(value: Any, problem: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        problem("schedule", "must be a cron expression, a preset such as '@daily', or null")
        return None
    if value.startswith("@"):
        if value not in _CRON_PRESETS:
            problem("schedule", f"unknown preset {value!r}; use one of {sorted(_CRON_PRESETS)}")
        return value
    parts = value.split()
    if len(parts) not in (5, 6) or not all(_CRON_FIELD.match(p) for p in parts):
        problem("schedule", f"{value!r} is not a cron expression with 5 fields")
    return value


def _start_date(value: Any, problem: Any) -> dt.datetime | None:
    if isinstance(value, dt.datetime):
        parsed = value
    elif isinstance(value, dt.date):
        parsed = dt.datetime(value.year, value.month, value.day)
    elif isinstance(value, str):
        try:
            parsed = dt.datetime.fromisoformat(value)
        except ValueError:
            problem("start_date", f"{value!r} is not an ISO date such as 2026-01-01")
            return None
    else:
        problem("start_date", "must be an ISO date such as 2026-01-01")
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)


def _positive_int(key: str, value: Any, problem: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int):
        problem(key, f"must be a whole number, got {value!r}")
        return None
    if value <= 0:
        problem(key, f"must be greater than 0, got {value}")
        return None
    return value


def _positive_number(key: str, value: Any, problem: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        problem(key, f"must be a number greater than 0, got {value!r}")
        return None
    return float(value)


def _remote(raw: Any, tenant_column: Any, problem: Any) -> RemoteSpec | None:
    """Validate the ``remote:`` section; problems are reported as ``remote.<field>``."""

    def remote_problem(key: str, message: str) -> None:
        problem(f"remote.{key}", message)

    if not isinstance(raw, dict):
        remote_problem("*", "must be a mapping of fields")
        return None
    for key in sorted(set(raw) - set(_REMOTE_REQUIRED) - set(_REMOTE_OPTIONAL)):
        known = ", ".join(_REMOTE_REQUIRED + _REMOTE_OPTIONAL)
        remote_problem(key, f"unknown field; known fields are {known}")
    for key in _REMOTE_REQUIRED:
        if key not in raw:
            remote_problem(key, "required field is missing")
    values: dict[str, Any] = {}
    for key in ("http_conn_id", "pool", "limiter_scope"):
        if key in raw:
            if isinstance(raw[key], str) and raw[key].strip():
                values[key] = raw[key]
            else:
                remote_problem(key, "must be a non-empty string")
    for key in ("object_id_column", "version_column"):
        if raw.get(key) is not None:
            values[key] = _identifier(f"remote.{key}", raw[key], problem)
    endpoint = raw.get("endpoint")
    if endpoint is not None:
        fields = set(re.findall(r"{([^{}]*)}", str(endpoint)))
        if not isinstance(endpoint, str) or "{object_id}" not in endpoint:
            remote_problem("endpoint", "must be a path containing {object_id}")
        elif fields - _ENDPOINT_FIELDS:
            remote_problem(
                "endpoint", f"unknown placeholder(s) {sorted(fields - _ENDPOINT_FIELDS)}"
            )
        elif "tenant_id" in fields and not tenant_column:
            remote_problem("endpoint", "{tenant_id} needs the policy's tenant_column")
        else:
            values["endpoint"] = endpoint
    method = str(raw.get("method", "DELETE")).upper()
    if method not in _METHODS:
        remote_problem("method", f"must be one of {sorted(_METHODS)}")
    values["method"] = method
    header = raw.get("idempotency_header", "Idempotency-Key")
    if not isinstance(header, str) or not _HEADER.match(header):
        remote_problem("idempotency_header", "must be an HTTP header name")
    values["idempotency_header"] = header
    for key in ("burst", "max_attempts", "claim_batch", "auth_failure_limit"):
        if key in raw:
            values[key] = _positive_int(f"remote.{key}", raw[key], problem)
    for key in (
        "rate_per_second",
        "request_timeout_seconds",
        "task_budget_seconds",
        "lease_seconds",
        "recovery_seconds",
        "backoff_base_seconds",
        "backoff_max_seconds",
    ):
        if key in raw:
            values[key] = _positive_number(f"remote.{key}", raw[key], problem)
    lease, timeout = values.get("lease_seconds"), values.get("request_timeout_seconds", 10.0)
    if lease and timeout and lease <= timeout:
        remote_problem("lease_seconds", "must be longer than request_timeout_seconds")
    # Problems were reported above; parse_policy drops the whole policy then.
    if any(v is None for v in values.values()) or any(k not in values for k in _REMOTE_REQUIRED):
        return None
    values.setdefault("limiter_scope", values["http_conn_id"])
    return RemoteSpec(**values)


def _notify(raw: Any, problem: Any) -> NotifySpec | None:
    """Validate the ``notify:`` section; problems are reported as ``notify.<field>``."""
    if not isinstance(raw, dict):
        problem("notify", "must be a mapping with http_conn_id and endpoint")
        return None
    known = {f.name for f in NotifySpec.__dataclass_fields__.values()}
    values: dict[str, Any] = {}
    for key in sorted(set(raw) - known):
        problem(f"notify.{key}", f"unknown field; known fields are {', '.join(sorted(known))}")
    for key in ("http_conn_id", "endpoint"):
        if not isinstance(raw.get(key), str) or not raw[key].strip():
            problem(f"notify.{key}", "required, a non-empty string")
        else:
            values[key] = raw[key]
    if "max_attempts" in raw:
        values["max_attempts"] = _positive_int("notify.max_attempts", raw["max_attempts"], problem)
    for key in ("timeout_seconds", "backoff_base_seconds", "backoff_max_seconds"):
        if key in raw:
            values[key] = _positive_number(f"notify.{key}", raw[key], problem)
    if any(v is None for v in values.values()) or not {"http_conn_id", "endpoint"} <= set(values):
        return None
    return NotifySpec(**values)


def _identifier(key: str, value: Any, problem: Any) -> str | None:
    if not isinstance(value, str) or not _IDENTIFIER.match(value):
        problem(
            key,
            f"{value!r} is not a plain SQL identifier "
            "(letters, digits, underscores; at most 63 characters)",
        )
        return None
    return value


def _table(value: Any, problem: Any) -> TableName | None:
    if not isinstance(value, str) or not value.strip():
        problem("table", "must be 'schema.table' or 'table'")
        return None
    parts = value.split(".")
    if len(parts) > 2 or not all(_IDENTIFIER.match(p) for p in parts):
        problem("table", f"{value!r} is not 'schema.table' made of plain SQL identifiers")
        return None
    schema, name = parts if len(parts) == 2 else ("public", parts[0])
    return TableName(schema=schema, name=name)
