"""The policy model: one pydantic model per section of a retention policy.

The YAML contract is flat (``table``, ``key_column``, ``lock_timeout_ms``, …)
with nested sections (``remote:``, ``notify:``, ``health:``, ``alerts:``). Every default is
stated once, here, and every rule is a field constraint or a validator, so
the JSON Schema editors use (``python -m retention.cli schema``) and the
field table of docs/policies.md are generated from the same source and cannot drift.

Lower layers take only the part they need: :class:`TableSpec` (what table and
columns), :class:`Timeouts` (how long a statement may run or wait),
:class:`RemoteSpec`, :class:`NotifySpec` and :class:`AlertsSpec`.
"""

from __future__ import annotations

import datetime as dt
import re
import string
from dataclasses import dataclass
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterBadCronError, CroniterBadDateError, croniter
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    TypeAdapter,
    WithJsonSchema,
    WrapValidator,
    model_validator,
)

DAG_ID_PREFIX = "retention__"
DEFAULT_REMOTE_MAX_LAG_HOURS = 72.0
WINDOW_ROWS_BOUNDS = (1, 10_000_000)
BATCH_ROWS_BOUNDS = (1, 100_000)

IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")
POLICY_NAME = re.compile(r"[A-Za-z0-9_]{1,100}")  # the name is also a DAG tag (≤ 100)
HEADER_NAME = re.compile(r"[A-Za-z0-9-]{1,100}")
# What Airflow accepts as a schedule preset (its cron_presets, plus @once).
CRON_PRESETS = {
    "@once": None,
    "@hourly": "0 * * * *",
    "@daily": "0 0 * * *",
    "@weekly": "0 0 * * 0",
    "@monthly": "0 0 1 * *",
    "@quarterly": "0 0 1 */3 *",
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
}
ENDPOINT_FIELDS = ("object_id", "tenant_id")
# Every field that names a column of the policy's table, as a dotted path. The table check
# (``retention.db.table_check``) looks each one up in the live table before a run touches
# it, and the Retention view shows the same check: a new column-naming field (a hold flag,
# a child table's key) is listed here and is checked with the others.
COLUMN_FIELDS = (
    "key_column",
    "timestamp_column",
    "tenant_column",
    "hold_column",
    "remote.object_id_column",
    "remote.version_column",
)


def _identifier(value: str) -> str:
    if not IDENTIFIER.fullmatch(value):
        raise ValueError(
            f"{value!r} is not a plain SQL identifier "
            "(letters, digits, underscores; at most 63 characters)"
        )
    return value


def _header(value: str) -> str:
    if not HEADER_NAME.fullmatch(value):
        raise ValueError(f"{value!r} is not an HTTP header name (letters, digits, '-')")
    return value


def _table(value: str) -> str:
    parts = value.split(".")
    if len(parts) > 2 or not all(IDENTIFIER.fullmatch(p) for p in parts):
        raise ValueError(f"{value!r} is not 'schema.table' made of plain SQL identifiers")
    return value if len(parts) == 2 else f"public.{value}"


# Names whose DAG id (retention__<name>) the package's own DAGs take.
RESERVED_POLICY_NAMES = frozenset({"replay"})


def _policy_name(value: str) -> str:
    if not POLICY_NAME.fullmatch(value):
        raise ValueError("use letters, digits and underscores only (it becomes the DAG id)")
    if value in RESERVED_POLICY_NAMES:
        raise ValueError(
            f"{value!r} is taken: retention__{value} is the package's own DAG; choose another name"
        )
    return value


def _timezone(value: str) -> str:
    try:
        ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError) as bad:
        raise ValueError(f"{value!r} is not an IANA time zone name such as 'UTC'") from bad
    return value


def _schedule(value: str | None) -> str | None:
    """Checked as Airflow checks it: presets by name, anything else by croniter."""
    if value is None:
        return None
    if value.startswith("@"):
        if value not in CRON_PRESETS:
            raise ValueError(f"unknown preset {value!r}; use one of {sorted(CRON_PRESETS)}")
        return value
    try:
        croniter(value)
    except (CroniterBadCronError, CroniterBadDateError) as bad:
        raise ValueError(f"{value!r} is not a cron expression: {bad}") from bad
    return value


def _start_date(value: Any) -> Any:
    """YAML gives a date, a datetime or a string; all become an aware datetime (UTC if naive)."""
    if isinstance(value, str):
        try:
            value = dt.datetime.fromisoformat(value)
        except ValueError as bad:
            raise ValueError(f"{value!r} is not an ISO date such as 2026-01-01") from bad
    if isinstance(value, dt.date) and not isinstance(value, dt.datetime):
        value = dt.datetime(value.year, value.month, value.day)
    if isinstance(value, dt.datetime):
        return value if value.tzinfo else value.replace(tzinfo=dt.UTC)
    raise ValueError("must be an ISO date such as 2026-01-01")


def _endpoint(value: str) -> str:
    """A path template whose only fields are {object_id} (required) and {tenant_id}."""
    try:
        parsed = list(string.Formatter().parse(value))
    except ValueError as bad:
        raise ValueError(f"{value!r} is not a path template: {bad}") from bad
    fields = [name for _, name, _, _ in parsed if name is not None]
    unknown = sorted({f for f in fields if f not in ENDPOINT_FIELDS})
    if unknown:
        raise ValueError(f"unknown placeholder(s) {unknown}; use {{object_id}} and {{tenant_id}}")
    if any(spec or conversion for _, name, spec, conversion in parsed if name is not None):
        raise ValueError("placeholders take no format spec or conversion")
    if "object_id" not in fields:
        raise ValueError("must be a path containing {object_id}")
    if not value.startswith("/"):
        raise ValueError("must be a path starting with '/'")
    rendered = value.format(object_id="SENTINEL-OBJECT", tenant_id="SENTINEL-TENANT")
    if "SENTINEL-OBJECT" not in urlsplit(rendered).path:
        raise ValueError("{object_id} must be in the path, not in the query or fragment")
    return value


def _not_blank(value: str) -> str:
    if not value.strip():
        raise ValueError("must be a non-empty string")
    return value


IDENTIFIER_SCHEMA = {"type": "string", "pattern": "^[A-Za-z_][A-Za-z0-9_]{0,62}$"}
Identifier = Annotated[str, AfterValidator(_identifier), WithJsonSchema(IDENTIFIER_SCHEMA)]
NonEmpty = Annotated[
    str,
    Field(min_length=1, max_length=250),
    AfterValidator(_not_blank),
    WithJsonSchema({"type": "string", "minLength": 1, "maxLength": 250, "pattern": "\\S"}),
]
Tag = Annotated[
    str,
    Field(min_length=1, max_length=100),
    AfterValidator(_not_blank),
    WithJsonSchema({"type": "string", "minLength": 1, "maxLength": 100, "pattern": "\\S"}),
]


class PolicyRuleError(ValueError):
    """A rule across fields, raised inside a validator, that names the field to fix."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message

    def __str__(self) -> str:
        return f"[{self.field}] {self.message}"


class Section(BaseModel):
    """Shared strictness: unknown keys, wrong types and non-finite numbers are errors."""

    model_config = ConfigDict(
        extra="forbid", strict=True, frozen=True, allow_inf_nan=False, validate_default=False
    )


MAIN_RESOURCE = "object"  # the resource name of the object itself (remote.endpoint)
MAX_RATE_PER_SECOND = 100_000
AUTO_RATE = "auto"
# ``rate_per_second: auto`` starts at one call per second: the first answer's headers
# set the pace, so only the calls before it go at this rate, and one a second is within
# the smallest limits APIs commonly publish (60 a minute), so those first calls cannot
# overrun a quota the scope knows nothing of yet.
AUTO_STARTING_RATE = 1.0
_RATE_NUMBER = TypeAdapter(
    Annotated[float, Field(gt=0, le=MAX_RATE_PER_SECOND, strict=True, allow_inf_nan=False)]
)


def _rate_per_second(value: Any, handler: Any) -> float | str:
    """A number of calls per second (the usual bounds and messages), or ``auto``."""
    if value == AUTO_RATE:
        return AUTO_RATE
    if isinstance(value, str):
        raise ValueError(f"must be a number or {AUTO_RATE!r}, got {value!r}")
    return _RATE_NUMBER.validate_python(value)


RatePerSecond = Annotated[
    float | Literal["auto"],
    WrapValidator(_rate_per_second),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "number", "exclusiveMinimum": 0, "maximum": MAX_RATE_PER_SECOND},
                {"const": AUTO_RATE},
            ]
        }
    ),
]
HttpMethod = Annotated[
    Literal["DELETE", "POST", "PUT", "PATCH"],
    WithJsonSchema({"enum": ["DELETE", "POST", "PUT", "PATCH", "delete", "post", "put", "patch"]}),
]
Endpoint = Annotated[
    str,
    AfterValidator(_endpoint),
    WithJsonSchema({"type": "string", "pattern": "^/.*\\{object_id\\}"}),
]


def _upper_method(data: Any) -> Any:
    if isinstance(data, dict) and isinstance(data.get("method"), str):
        return {**data, "method": data["method"].upper()}
    return data


class DerivativeSpec(Section):
    """One of ``remote.derivatives:``: another resource of each object (thumbnails,
    transcodes) deleted by its own call before the row goes."""

    name: Identifier = Field(
        description="The resource's name (unique in the policy, not 'object'); part of its "
        "operation key and named in the evidence and the retention.deleted event."
    )
    endpoint: Endpoint = Field(
        description="Path template of this resource; {object_id} and {tenant_id} are filled."
    )
    method: HttpMethod = Field("DELETE", description="HTTP method of its deletion call (any case).")
    not_found_is_deleted: bool | None = Field(
        None,
        description="A 404 confirms this resource's deletion; default: the policy's "
        "remote.not_found_is_deleted.",
    )

    @model_validator(mode="before")
    @classmethod
    def _upper_method(cls, data: Any) -> Any:
        return _upper_method(data)


class RemoteSpec(Section):
    """``remote:``: objects deleted through a rate-limited HTTP API before their rows."""

    http_conn_id: NonEmpty = Field(
        description="Airflow HTTP connection of the deletion API (host, auth, extra headers)."
    )
    endpoint: Endpoint = Field(
        description="Path template; {object_id} and {tenant_id} are filled, URL-encoded."
    )
    object_id_column: Identifier = Field(description="Column holding the remote object's id.")
    rate_per_second: RatePerSecond = Field(
        description="Calls per second, shared by every worker of the scope; the API's "
        "rate-limit headers can only lower it. `auto`: start low and take the rate from "
        "the headers, up to max_rate_per_second."
    )
    max_rate_per_second: float | None = Field(
        None,
        gt=0,
        le=MAX_RATE_PER_SECOND,
        description="With rate_per_second: auto (and only then; required there): the most "
        "calls per second the headers may set.",
    )
    burst: int = Field(gt=0, le=100_000, description="Calls the bucket may allow at once.")
    pool: NonEmpty = Field(
        description="Airflow pool of the tasks that call the API (the windows and the drain)."
    )
    method: HttpMethod = Field("DELETE", description="HTTP method of the deletion call (any case).")
    version_column: Identifier | None = Field(
        None, description="Column with the object's version; default: the row's timestamp."
    )
    idempotency_header: Annotated[
        str,
        AfterValidator(_header),
        WithJsonSchema({"type": "string", "pattern": "^[A-Za-z0-9-]{1,100}$"}),
    ] = Field("Idempotency-Key", description="Header carrying the operation key on every attempt.")
    limiter_scope: NonEmpty | None = Field(
        None,
        description="Token bucket shared by every policy naming it (default: http_conn_id); "
        "policies sharing a scope must agree on rate, burst and database.",
    )
    max_attempts: int = Field(
        8, gt=0, le=1000, description="Attempts (429s not counted) before an operation is dead."
    )
    request_timeout_seconds: float = Field(
        10.0, gt=0, le=3600, description="Timeout of one API call."
    )
    claim_batch: int = Field(
        50,
        gt=0,
        le=1000,
        description="Operations claimed (leased) at once, and recorded in one statement.",
    )
    task_budget_seconds: float = Field(
        600.0, gt=0, le=86_400, description="How long one task keeps calling before it hands back."
    )
    lease_seconds: float | None = Field(
        None,
        gt=0,
        le=86_400,
        description="Lease of a claimed operation (default: max(60, 3 × request timeout)); "
        "must exceed the request timeout.",
    )
    recovery_seconds: float = Field(
        60.0,
        gt=0,
        le=86_400,
        description="Time for the rate to climb back after a 429 (from nothing to "
        "rate_per_second; four times longer above the rate the API admitted).",
    )
    auth_failure_limit: int = Field(
        5, gt=0, le=1000, description="401/403 answers in a row that stop the task."
    )
    backoff_base_seconds: float = Field(
        2.0, gt=0, le=86_400, description="First retry delay of an uncertain failure."
    )
    backoff_max_seconds: float = Field(
        600.0, gt=0, le=86_400, description="Cap of the exponential backoff."
    )
    not_found_is_deleted: bool = Field(
        True,
        description="A 404 confirms the deletion (the object is already gone); false makes "
        "it a rejection, dead for review.",
    )
    held_statuses: Annotated[
        tuple[Annotated[int, Field(ge=300, le=599)], ...], Field(strict=False, max_length=50)
    ] = Field(
        (),
        description="Answers meaning the remote side holds the object (e.g. [423], an object "
        "store's lock refusal): the operation waits in 'held' with the answer as its reason, "
        "is re-checked on the next run, and spends no attempt (never dead-lettered for it).",
    )
    not_found_breaker: int = Field(
        20,
        ge=0,
        le=10_000,
        description="A 404 counts as a deletion only once the API answered 2xx (in this task "
        "or the last day); until then 404s are held, and this many stop the task (the "
        "endpoint template or connection is probably wrong). Nothing is deleted on them. "
        "0 turns the check off.",
    )

    derivatives: Annotated[tuple[DerivativeSpec, ...], Field(strict=False, max_length=20)] = Field(
        (),
        description="More resources of each object (thumbnails, transcodes), each deleted by "
        "its own call; the row goes only when the object and every derivative are confirmed.",
    )

    @model_validator(mode="before")
    @classmethod
    def _upper_method(cls, data: Any) -> Any:
        return _upper_method(data)

    @model_validator(mode="after")
    def _derivative_names(self) -> RemoteSpec:
        names = [d.name for d in self.derivatives]
        if MAIN_RESOURCE in names:
            raise PolicyRuleError(
                "derivatives",
                f"{MAIN_RESOURCE!r} names the object itself (remote.endpoint); give the "
                "derivative another name",
            )
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise PolicyRuleError(
                "derivatives", f"each derivative needs its own name; {twice} appear twice"
            )
        return self

    @model_validator(mode="after")
    def _auto_rate_has_a_ceiling(self) -> RemoteSpec:
        if self.auto_rate and self.max_rate_per_second is None:
            raise PolicyRuleError(
                "max_rate_per_second",
                "rate_per_second: auto needs max_rate_per_second, the most calls per second "
                "the API's headers may set (for example the rate its documentation promises)",
            )
        if not self.auto_rate and self.max_rate_per_second is not None:
            raise PolicyRuleError(
                "max_rate_per_second",
                f"max_rate_per_second is read only with rate_per_second: auto; this "
                f"policy's rate is {self.rate_per_second:g}/s: remove max_rate_per_second, "
                "or set rate_per_second: auto",
            )
        return self

    @model_validator(mode="after")
    def _lease_outlasts_a_call(self) -> RemoteSpec:
        if self.lease_seconds is not None and self.lease_seconds <= self.request_timeout_seconds:
            raise PolicyRuleError("lease_seconds", "must be longer than request_timeout_seconds")
        return self

    @property
    def lease(self) -> float:
        """Leases outlast a request timeout several times over."""
        return self.lease_seconds or max(60.0, 3 * self.request_timeout_seconds)

    @property
    def auto_rate(self) -> bool:
        """``rate_per_second: auto``: the API's rate-limit headers set the rate."""
        return self.rate_per_second == AUTO_RATE

    @property
    def rate_ceiling(self) -> float:
        """The most calls per second the scope makes: ``rate_per_second``, or with
        ``auto`` its ``max_rate_per_second``."""
        if isinstance(self.rate_per_second, float):
            return self.rate_per_second
        assert self.max_rate_per_second is not None  # _auto_rate_has_a_ceiling
        return self.max_rate_per_second

    @property
    def starting_rate(self) -> float:
        """The rate before the API's headers said anything: the ceiling, or with ``auto``
        :data:`AUTO_STARTING_RATE` (never above the ceiling)."""
        return min(self.rate_ceiling, AUTO_STARTING_RATE) if self.auto_rate else self.rate_ceiling

    @property
    def scope(self) -> str:
        """The limiter scope: shared token bucket of every policy that names it."""
        return self.limiter_scope or self.http_conn_id

    @property
    def resources(self) -> tuple[str, ...]:
        """Every resource of an object: the object itself, then each derivative."""
        return (MAIN_RESOURCE, *(d.name for d in self.derivatives))

    def call_of(self, resource: str) -> tuple[str, str, bool]:
        """How one resource is deleted: its endpoint template, its method, and whether
        its 404 confirms the deletion."""
        if resource == MAIN_RESOURCE:
            return self.endpoint, self.method, self.not_found_is_deleted
        for d in self.derivatives:
            if d.name == resource:
                gone = (
                    self.not_found_is_deleted
                    if d.not_found_is_deleted is None
                    else (d.not_found_is_deleted)
                )
                return d.endpoint, d.method, gone
        raise KeyError(f"remote has no resource {resource!r} (it has {list(self.resources)})")


class NotifySpec(Section):
    """``notify:``: signed ``retention.deleted`` events to a webhook receiver.

    The signing secret (``whsec_...``) is the connection's password.
    """

    http_conn_id: NonEmpty = Field(description="Airflow HTTP connection of the receiver.")
    endpoint: NonEmpty = Field(description="Path events are POSTed to.")
    pool: NonEmpty = Field("default_pool", description="Airflow pool of the deliver_events task.")
    max_attempts: int = Field(
        12, gt=0, le=1000, description="Delivery attempts (429s not counted) before dead."
    )
    timeout_seconds: float = Field(10.0, gt=0, le=3600, description="Timeout of one delivery.")
    backoff_base_seconds: float = Field(5.0, gt=0, le=86_400, description="First retry delay.")
    backoff_max_seconds: float = Field(
        3600.0, gt=0, le=86_400, description="Cap of the exponential backoff."
    )
    claim_batch: int = Field(20, gt=0, le=1000, description="Events claimed (leased) at once.")
    lease_seconds: float | None = Field(
        None,
        gt=0,
        le=86_400,
        description="Lease of a claimed event (default: max(60, 3 × timeout)); "
        "must exceed timeout_seconds.",
    )
    task_budget_seconds: float = Field(
        600.0, gt=0, le=86_400, description="How long one task keeps delivering."
    )

    @model_validator(mode="after")
    def _lease_outlasts_a_call(self) -> NotifySpec:
        if self.lease_seconds is not None and self.lease_seconds <= self.timeout_seconds:
            raise PolicyRuleError("lease_seconds", "must be longer than timeout_seconds")
        return self

    @property
    def lease(self) -> float:
        return self.lease_seconds or max(60.0, 3 * self.timeout_seconds)


ALERT_TARGETS = (
    "on_dirty",
    "on_lag",
    "on_dead_letters",
    "on_failure",
    "on_deadline",
    "on_erasure_late",
)


class AlertsSpec(Section):
    """``alerts:``: JSON messages to HTTP connections when a run needs a person, once per run.

    Each ``on_*`` field names the Airflow HTTP connection its message is POSTed
    to (Slack-shaped when the connection's extra says ``"format": "slack"``).
    A threshold travels with the alert that needs it: ``lag_minutes`` with
    ``on_lag``, ``deadline_minutes`` with ``on_deadline``.
    """

    on_dirty: NonEmpty | None = Field(
        None,
        description="HTTP connection told when reconcile finds the run dirty (rows older "
        "than the cutoff left, windows unfinished, events undelivered).",
    )
    on_lag: NonEmpty | None = Field(
        None,
        description="HTTP connection told when the oldest eligible row left in the table has "
        "waited longer than lag_minutes past its cutoff (needs lag_minutes).",
    )
    lag_minutes: float | None = Field(
        None,
        gt=0,
        le=525_600,
        description="How long an eligible row may wait past its cutoff before on_lag fires; "
        "below max_lag_hours, it warns before a remote backlog makes runs dirty.",
    )
    on_dead_letters: NonEmpty | None = Field(
        None,
        description="HTTP connection told when operations or events went dead during the run "
        "(dead ones of earlier runs are not told again).",
    )
    on_failure: NonEmpty | None = Field(
        None,
        description="HTTP connection told when a task of the run failed; a dirty run goes to "
        "on_dirty instead when that is set.",
    )
    on_deadline: NonEmpty | None = Field(
        None,
        description="HTTP connection told when a run is still going deadline_minutes after it "
        "was queued (an Airflow Deadline Alert; needs deadline_minutes).",
    )
    deadline_minutes: float | None = Field(
        None,
        gt=0,
        le=525_600,
        description="Minutes after a run is queued by which it should have finished.",
    )
    on_erasure_late: NonEmpty | None = Field(
        None,
        description="HTTP connection told, once, when an erasure of the policy is not done by "
        "its deadline, or as soon as one fails; without it, on_failure is told.",
    )

    @model_validator(mode="after")
    def _thresholds_with_their_alerts(self) -> AlertsSpec:
        pairs = (
            ("on_lag", "lag_minutes", "how long an eligible row may wait past its cutoff"),
            ("on_deadline", "deadline_minutes", "how long after it is queued a run should end"),
        )
        for target, threshold, meaning in pairs:
            has_target = getattr(self, target) is not None
            has_threshold = getattr(self, threshold) is not None
            if has_target and not has_threshold:
                raise PolicyRuleError(threshold, f"{target} needs {threshold} ({meaning})")
            if has_threshold and not has_target:
                raise PolicyRuleError(
                    target, f"{threshold} is set, so name the HTTP connection to tell in {target}"
                )
        if all(getattr(self, target) is None for target in ALERT_TARGETS):
            raise ValueError(f"name at least one connection: {', '.join(ALERT_TARGETS)}")
        return self

    def targets(self) -> dict[str, str]:
        """Alert kind (``dirty``, ``lag``, …) → the connection it goes to, for those set."""
        named = {t.removeprefix("on_"): getattr(self, t) for t in ALERT_TARGETS}
        return {kind: conn_id for kind, conn_id in named.items() if conn_id is not None}


MAX_CHILD_DEPTH = 3  # children, grandchildren, great-grandchildren

TableName = Annotated[
    str,
    AfterValidator(_table),
    WithJsonSchema(
        {
            "type": "string",
            "pattern": "^([A-Za-z_][A-Za-z0-9_]{0,62}\\.)?[A-Za-z_][A-Za-z0-9_]{0,62}$",
        }
    ),
]


class ChildTable(Section):
    """``children:``: a table whose rows reference the policy's rows (or a listed child's),
    deleted with them in the same transaction, deepest first, so that a foreign key never
    fails a batch and no child row outlives its parent."""

    table: TableName = Field(description="'schema.table' or 'table' (schema public).")
    foreign_key: Identifier = Field(
        description="Column of this table that references the parent's rows."
    )
    references: Identifier | None = Field(
        None,
        description="Parent column foreign_key holds; default: the column of the foreign key "
        "constraint, else the parent's primary key (set it for tables without a constraint).",
    )
    children: Annotated[tuple[ChildTable, ...], Field(strict=False, max_length=20)] = Field(
        (), description="Tables referencing this one's rows, nested up to 3 levels in all."
    )

    def walk(self, depth: int = 1) -> list[tuple[int, ChildTable]]:
        """This child and its descendants with their depth (1: references the policy's table)."""
        found = [(depth, self)]
        for child in self.children:
            found.extend(child.walk(depth + 1))
        return found


class IgnoredForeignKey(Section):
    """``ignore_foreign_keys:``: a foreign key the run may leave to the database, on purpose."""

    constraint: Identifier = Field(description="Name of the foreign key constraint.")
    reason: NonEmpty = Field(description="Why its rows need not go with the policy's rows.")


@dataclass(frozen=True)
class TableSpec:
    """The table a policy cleans and the columns that matter."""

    schema: str
    name: str
    key_column: str
    timestamp_column: str
    tenant_column: str | None
    timestamp_timezone: str = "UTC"  # how a column without a time zone is read
    hold_column: str | None = None  # the application's own hold flag (see holds.predicate)

    def __str__(self) -> str:
        return f"{self.schema}.{self.name}"


BUSY_SLEEP_RATIO = 1.0  # measured with make bench-foreground: see BENCHMARKS.md
WAL_BYTES_LIMIT = 10**15  # 1 PB: far past any real lag; a bound, so that a typo is caught
# application_name as Postgres keeps it (NAMEDATALEN - 1 bytes; ASCII is one byte a character)
# "" is a name too: the sessions that set no application_name (many pools' keep-alives).
ApplicationName = Annotated[str, Field(max_length=63)]


class HealthSpec(Section):
    """``health:``: when the deleters pause (or stop) for the database's sake.

    Checked between batches by the row deleter and before every claim by the
    remote worker, at most once a second.  A pause waits until the condition
    clears; past ``max_pause_seconds`` the task fails with the reason and a
    retry resumes.  An abort threshold fails the task at once (gh-ost's
    critical load).  A limit left empty is not checked.  Between batches the
    row deleter also sleeps ``sleep_ratio`` of each batch's time, or
    ``busy_sleep_ratio`` while at least ``busy_clients`` other clients of the
    database (not named in ``ignore_applications``) are at work.

    Replica lag is read two ways because ``replay_lag`` alone misleads: it is
    NULL once a standby has caught up and is not refreshed while replay is
    stalled, so ``max_replica_lag_bytes`` also measures the WAL between the
    primary and each standby's replay.  A standby that disconnects leaves no
    reading at all, hence ``expected_standbys``.
    """

    max_replica_lag_seconds: float | None = Field(
        30.0, gt=0, le=86_400, description="Pause while a standby replays this far behind."
    )
    max_replica_lag_bytes: int | None = Field(
        None,
        gt=0,
        le=WAL_BYTES_LIMIT,
        description="Pause while a standby's replay is this many bytes of WAL behind the "
        "primary (pg_current_wal_lsn() − replay_lsn), which, unlike replay_lag, also grows "
        "while replay is stalled. Empty: not checked.",
    )
    expected_standbys: int = Field(
        0,
        ge=0,
        le=100,
        description="Pause (reason standby_missing) while fewer physical standbys than this "
        "are connected: a disconnected standby leaves pg_stat_replication, so no lag reading "
        "sees it. 0: not checked.",
    )
    max_xact_age_seconds: float | None = Field(
        600.0,
        gt=0,
        le=86_400 * 30,
        description="Pause while another transaction this old holds back vacuum (xmin).",
    )
    pause_on_autovacuum: bool = Field(
        False,
        description="Pause while a vacuum (autovacuum or manual) works on the table (off by "
        "default: large deletes start autovacuum on the same table).",
    )
    max_blocked_sessions: int | None = Field(
        0,
        ge=0,
        le=10_000,
        description="Pause while more sessions than this wait on locks held by retention sessions.",
    )
    abort_replica_lag_seconds: float | None = Field(
        600.0, gt=0, le=86_400 * 30, description="Fail the task at once past this replica lag."
    )
    abort_replica_lag_bytes: int | None = Field(
        None,
        gt=0,
        le=WAL_BYTES_LIMIT,
        description="Fail the task at once past this replica lag in bytes of WAL.",
    )
    abort_xact_age_seconds: float | None = Field(
        None, gt=0, le=86_400 * 365, description="Fail the task at once past this xmin age."
    )
    abort_blocked_sessions: int | None = Field(
        None, ge=0, le=10_000, description="Fail the task at once past this many blocked sessions."
    )
    sleep_ratio: float = Field(
        0.0,
        ge=0,
        le=100,
        description="Sleep this fraction of each batch's time after it (pt-archiver's "
        "--sleep-coef).",
    )
    busy_sleep_ratio: float = Field(
        BUSY_SLEEP_RATIO,
        ge=0,
        le=100,
        description="Row policies: sleep this fraction of each batch's time (if larger than "
        "sleep_ratio) while other clients of the database are at work (a session not of "
        "retention active in the last second; needs pg_monitor to see other roles); 0: never.",
    )
    busy_clients: int = Field(
        1,
        ge=1,
        le=10_000,
        description="How many other clients at work make the database busy for "
        "busy_sleep_ratio (gh-ost's --max-load Threads_running=N); 1: any.",
    )
    ignore_applications: Annotated[
        tuple[ApplicationName, ...], Field(strict=False, max_length=100)
    ] = Field(
        (),
        description="application_name values whose sessions never count as clients at work "
        '(monitoring agents, a pool\'s keep-alives); exact names, "" for sessions that set '
        "none.",
    )
    max_pause_seconds: float = Field(
        600.0,
        gt=0,
        le=86_400,
        description="Longest one pause may last before the task fails with its reason.",
    )


@dataclass(frozen=True)
class Timeouts:
    """Per-transaction bounds: what a delete may wait for a lock or run, and a planning read."""

    lock_ms: int
    statement_ms: int
    plan_statement_ms: int


@dataclass(frozen=True)
class BatchTiming:
    """How the row deleter sizes its batches: aim at ``target_ms`` within [min_rows, max_rows]."""

    target_ms: float = 100.0
    min_rows: int = 1
    max_rows: int = 100_000


class Policy(Section):
    """One retention policy; field names are the YAML contract."""

    name: Annotated[str, AfterValidator(_policy_name)] = Field(
        exclude=True, description="The policy's key in the file (set by the loader)."
    )
    schedule: Annotated[str | None, AfterValidator(_schedule)] = Field(
        description="Cron expression, preset (@daily, …) or null for manual runs only."
    )
    start_date: Annotated[
        dt.datetime,
        BeforeValidator(_start_date),
        WithJsonSchema({"type": "string", "examples": ["2026-01-01"]}),
    ] = Field(description="ISO date; fixed, never relative.")
    retain_days: int = Field(
        gt=0, le=36_500, description="Rows older than anchor − retain_days are deleted."
    )
    postgres_conn_id: NonEmpty = Field(
        description="Airflow connection of the database holding the table and the ledger."
    )
    table: Annotated[
        str,
        AfterValidator(_table),
        WithJsonSchema(
            {
                "type": "string",
                "pattern": "^([A-Za-z_][A-Za-z0-9_]{0,62}\\.)?[A-Za-z_][A-Za-z0-9_]{0,62}$",
            }
        ),
    ] = Field(description="'schema.table' or 'table' (schema public).")
    key_column: Identifier = Field(description="Integer key, unique and indexed.")
    timestamp_column: Identifier = Field(
        description="timestamptz, or timestamp / date read in timestamp_timezone."
    )
    timestamp_timezone: Annotated[
        str,
        AfterValidator(_timezone),
        WithJsonSchema({"type": "string", "examples": ["UTC", "Europe/Berlin"]}),
    ] = Field(
        "UTC",
        description="IANA time zone in which a timestamp or date column without a time zone "
        "is read (its wall-clock values are in this zone).",
    )
    window_rows: int | None = Field(
        None,
        gt=WINDOW_ROWS_BOUNDS[0] - 1,
        le=WINDOW_ROWS_BOUNDS[1],
        description="Override: about this many eligible rows per window (one mapped task). "
        "Default: as many as the policy's earlier windows deleted in target_window_seconds.",
    )
    target_window_seconds: float = Field(
        30.0,
        gt=0,
        le=3600,
        description="Work each window (one mapped task) should carry, so that Airflow's "
        "per-task cost stays small beside it.",
    )
    batch_rows: int = Field(
        1000,
        gt=BATCH_ROWS_BOUNDS[0] - 1,
        le=BATCH_ROWS_BOUNDS[1],
        description="Keys in a window's first delete transaction; later ones are sized "
        "to target_batch_ms. At most window_rows.",
    )
    target_batch_ms: float = Field(
        100.0,
        gt=0,
        le=60_000,
        description="Time each delete transaction should take; the batch size moves towards "
        "it after every batch (+10% / -20% at most per step).",
    )
    min_batch_rows: int = Field(
        1, gt=0, le=BATCH_ROWS_BOUNDS[1], description="Smallest batch sized by time."
    )
    max_batch_rows: int = Field(
        BATCH_ROWS_BOUNDS[1],
        gt=0,
        le=BATCH_ROWS_BOUNDS[1],
        description="Largest batch sized by time.",
    )
    pool: NonEmpty = Field(
        "default_pool",
        description="Airflow pool of delete_window for row policies; a remote policy's "
        "windows run in remote.pool instead, and this field is then unused.",
    )
    pool_slots: int = Field(1, gt=0, le=1000, description="Pool slots each window takes.")
    tenant_column: Identifier | None = Field(None, description="Column naming the tenant.")
    hold_column: Identifier | None = Field(
        None,
        description="Column of the application's own legal holds: a row where it is true "
        "(or, for a column that is not boolean, not null) is held and never deleted, nor "
        "its object.",
    )
    partitions: Literal["drop", "detach_only", "rows"] = Field(
        "drop",
        description="When the table is range-partitioned on timestamp_column: partitions "
        "wholly older than the cutoff are detached and dropped (drop), only detached "
        "(detach_only), or deleted row by row like the rest (rows). Not for remote policies, "
        "nor for a policy that lists children: (their rows go with their parents' batches).",
    )
    window_per_tenant: bool = Field(
        False,
        description="With tenant_column: one group of windows per tenant (opt-in: planning and "
        "deleting read the table once per tenant, 3–5× slower where tenants' rows "
        "interleave). Default: key ranges across tenants.",
    )
    owner: NonEmpty = Field("data-platform", description="DAG owner.")
    tags: Annotated[tuple[Tag, ...], Field(strict=False, max_length=50)] = Field(
        (), description="Extra DAG tags, 1–100 characters each."
    )
    description: Annotated[str, BeforeValidator(str), Field(max_length=10_000)] = Field(
        "", description="Text for the DAG docs."
    )
    lock_timeout_ms: int = Field(
        1000, gt=0, le=3_600_000, description="lock_timeout of each delete transaction."
    )
    statement_timeout_ms: int = Field(
        10_000, gt=0, le=3_600_000, description="statement_timeout of each delete transaction."
    )
    plan_statement_timeout_ms: int = Field(
        120_000, gt=0, le=86_400_000, description="statement_timeout of planning and counting."
    )
    revision: int = Field(
        1, gt=0, le=1_000_000, description="Part of every operation key: bump to re-drive all."
    )
    audit_days: int = Field(
        400, gt=0, le=36_500, description="Days deletion evidence is kept before it is purged."
    )
    max_lag_hours: float | None = Field(
        None,
        gt=0,
        le=1_000_000,
        description="Reconcile fails when an eligible row waits longer than this past its "
        f"cutoff (default {DEFAULT_REMOTE_MAX_LAG_HOURS:g} for remote policies, none otherwise).",
    )
    analyze_after: bool = Field(
        True,
        description="After a run that deleted more than a tenth of the rows the table's "
        "statistics count (pg_class.reltuples), reconcile runs ANALYZE on the table "
        "(pt-archiver's --analyze), so the next plan and dry run estimate from fresh "
        "statistics; false leaves it to autovacuum.",
    )
    children: Annotated[tuple[ChildTable, ...], Field(strict=False, max_length=20)] = Field(
        (),
        description="Tables whose rows reference the policy's rows: deleted with them, deepest "
        "first, in the same transaction (see ChildTable).",
    )
    ignore_foreign_keys: Annotated[
        tuple[IgnoredForeignKey, ...], Field(strict=False, max_length=100)
    ] = Field(
        (),
        description="Foreign keys referencing the policy's table or a child that the run "
        "leaves alone (each with its reason); any other one not listed in children and not "
        "ON DELETE CASCADE / SET NULL fails the run before it deletes anything.",
    )
    remote: RemoteSpec | None = Field(
        None, description="Objects to delete through an HTTP API before their rows."
    )
    notify: NotifySpec | None = Field(
        None, description="Signed retention.deleted events (needs remote)."
    )
    health: HealthSpec = Field(
        default_factory=HealthSpec,
        description="Database-health pauses and aborts; safe defaults for a production primary.",
    )
    alerts: AlertsSpec | None = Field(
        None,
        description="Messages to HTTP connections when a run is dirty, lagging, leaves dead "
        "letters, fails or misses its deadline; once per run.",
    )

    @model_validator(mode="before")
    @classmethod
    def _remote_lag_default(cls, data: Any) -> Any:
        # Dead operations explain a row, but not forever: a remote policy always has a limit.
        if not isinstance(data, dict) or data.get("remote") is None:
            return data
        if data.get("max_lag_hours") is None:
            return {**data, "max_lag_hours": DEFAULT_REMOTE_MAX_LAG_HOURS}
        return data

    @model_validator(mode="after")
    def _cross_field_rules(self) -> Policy:
        if not self.min_batch_rows <= self.batch_rows <= self.max_batch_rows:
            raise PolicyRuleError(
                "batch_rows",
                f"{self.batch_rows} is outside [min_batch_rows, max_batch_rows] = "
                f"[{self.min_batch_rows}, {self.max_batch_rows}]",
            )
        if self.window_rows is not None and self.batch_rows > self.window_rows:
            raise PolicyRuleError(
                "batch_rows",
                f"{self.batch_rows} is larger than window_rows ({self.window_rows}); "
                "a delete batch must fit inside one window",
            )
        if self.notify is not None and self.remote is None:
            raise PolicyRuleError(
                "notify", "events announce remote deletions: it needs a remote section"
            )
        deepest = max((depth for depth, _ in self.child_tables()), default=0)
        if deepest > MAX_CHILD_DEPTH:
            raise PolicyRuleError(
                "children", f"nested {deepest} levels deep; at most {MAX_CHILD_DEPTH} are allowed"
            )
        listed = [self.table] + [child.table for _, child in self.child_tables()]
        repeated = sorted({t for t in listed if listed.count(t) > 1})
        if repeated:
            raise PolicyRuleError(
                "children",
                f"{', '.join(repeated)} listed more than once (or is the policy's table)",
            )
        tenant_path = self.remote is not None and "{tenant_id}" in self.remote.endpoint
        if tenant_path and self.tenant_column is None:
            raise PolicyRuleError("remote.endpoint", "{tenant_id} needs the policy's tenant_column")
        return self

    @property
    def dag_id(self) -> str:
        return f"{DAG_ID_PREFIX}{self.name}"

    @property
    def table_spec(self) -> TableSpec:
        schema, name = self.table.split(".")
        return TableSpec(
            schema,
            name,
            self.key_column,
            self.timestamp_column,
            self.tenant_column,
            self.timestamp_timezone,
            self.hold_column,
        )

    def child_tables(self) -> list[tuple[int, ChildTable]]:
        """Every listed child, depth first, with its depth (1: references the policy's table)."""
        found: list[tuple[int, ChildTable]] = []
        for child in self.children:
            found.extend(child.walk())
        return found

    def named_columns(self) -> dict[str, str]:
        """Field (dotted path, see :data:`COLUMN_FIELDS`) → the column it names, for each
        column-naming field that is set."""
        named: dict[str, str] = {}
        for path in COLUMN_FIELDS:
            value: Any = self
            for part in path.split("."):
                value = getattr(value, part, None)
            if value is not None:
                named[path] = value
        return named

    @property
    def timeouts(self) -> Timeouts:
        return Timeouts(
            self.lock_timeout_ms, self.statement_timeout_ms, self.plan_statement_timeout_ms
        )

    @property
    def batch_timing(self) -> BatchTiming:
        return BatchTiming(self.target_batch_ms, self.min_batch_rows, self.max_batch_rows)


class PolicyFile(Section):
    """The whole file: ``policies:`` mapping a name to a policy (for the JSON Schema)."""

    policies: dict[Annotated[str, Field(pattern=r"^[A-Za-z0-9_]{1,100}$")], Policy] = Field(
        description="name → policy; the DAG id is retention__<name>."
    )
