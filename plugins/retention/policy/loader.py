"""Read the policies file: YAML without duplicate keys, one model per policy, cross-policy rules.

The file is read at DAG parse time (a local file, never a database), so this
stays cheap. Every problem is reported as ``policy 'x', field 'y': …`` and one
bad policy never hides the good ones: :func:`load_policies` returns both.
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from retention.paths import AIRFLOW_SETTINGS_PATH, DEFAULT_POLICIES_PATH
from retention.policy.model import AlertsSpec, NotifySpec, Policy, PolicyRuleError, RemoteSpec
from retention.progress import plural

DEFAULT_POOL = "default_pool"


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


@dataclass
class PolicySet:
    """What a policies file yielded: good policies, problems with the rest, and warnings."""

    path: Path
    policies: list[Policy] = field(default_factory=list)
    problems: list[PolicyProblem] = field(default_factory=list)
    warnings: dict[str, list[str]] = field(default_factory=dict)
    pool_slots: dict[str, int] = field(default_factory=dict)  # from airflow_settings.yaml
    file_error: str | None = None

    def error_report(
        self,
        extra: list[PolicyProblem] | None = None,
        *,
        shown: Callable[[str], bool] | None = None,
    ) -> str:
        """A message for the DAG import error; empty when everything is valid.

        ``shown(policy)`` keeps only the problems of the policies it accepts (the
        Retention view: those the user may read); the file's own error names no
        policy and is the caller's to show or not.
        """
        if self.file_error:
            return f"{self.path}: {self.file_error}"
        problems = self.problems + (extra or [])
        named = {p.name for p in self.policies} | {problem.policy for problem in problems}
        if shown is not None:
            problems = [problem for problem in problems if shown(problem.policy)]
            named = {name for name in named if shown(name)}
        if not problems:
            return ""
        # Counted, never assumed: when every policy has a problem, none was loaded.
        loaded = len(named - {problem.policy for problem in problems})
        lines = [f"{self.path}: {len(problems)} problem(s) in retention policies:"]
        lines += [f"  - {problem}" for problem in problems]
        lines.append(
            f"{loaded} of {plural(len(named), 'policy', 'policies')} loaded; "
            "fix these to get their DAGs back."
        )
        return "\n".join(lines)


def policies_path() -> Path:
    """The policies file: ``$RETENTION_POLICIES`` or ``include/retention_policies.yaml``."""
    override = os.environ.get("RETENTION_POLICIES")
    return Path(override) if override else DEFAULT_POLICIES_PATH


def load_policies(path: Path | None = None, settings: Path | None = None) -> PolicySet:
    """Read and validate every policy in ``path``; never raises for content problems."""
    path = path or policies_path()
    result = PolicySet(path=path)
    try:
        text = path.read_text()
        document = yaml.safe_load(text)
        duplicates = duplicate_keys(yaml.compose(text, Loader=yaml.SafeLoader))
    except FileNotFoundError:
        result.file_error = "file not found (set RETENTION_POLICIES or create it)"
        return result
    except yaml.YAMLError as exc:
        result.file_error = f"not valid YAML: {exc}"
        return result
    top_level = [d for d in duplicates if len(d[0]) < 2]
    if top_level:
        result.file_error = "; ".join(_duplicate_message(d) for d in top_level)
        return result
    if not isinstance(document, dict) or not isinstance(document.get("policies"), dict):
        result.file_error = "expected a mapping with a 'policies:' mapping of name -> policy"
        return result
    unknown_top = set(document) - {"policies"}
    if unknown_top:
        result.file_error = f"unknown top-level key(s): {', '.join(sorted(unknown_top))}"
        return result
    duplicated: dict[str, list[PolicyProblem]] = defaultdict(list)
    for keys, lines in duplicates:
        name = keys[1]
        where = ".".join(keys[2:]) or "*"
        duplicated[name].append(PolicyProblem(name, where, _duplicate_message((keys, lines))))
    for key, raw in document["policies"].items():
        name = str(key)
        if duplicated.get(name):
            result.problems += duplicated[name]
            continue
        policy, problems = parse_policy(name, raw)
        result.problems.extend(problems)
        if policy is not None:
            result.policies.append(policy)
    conflicts = limiter_scope_conflicts(result.policies)
    result.problems += conflicts
    bad = {p.policy for p in conflicts}
    result.policies = [p for p in result.policies if p.name not in bad]
    result.warnings = pool_warnings(result.policies, settings or AIRFLOW_SETTINGS_PATH)
    result.pool_slots = declared_pools(settings or AIRFLOW_SETTINGS_PATH) or {}
    return result


def duplicate_keys(node: yaml.Node | None) -> list[tuple[list[str], list[int]]]:
    """Keys named twice in one mapping, as (path of keys, line numbers), anywhere in the file.

    ``yaml.safe_load`` keeps the last value silently; this walks the composed
    node tree instead, so a repeated field is an error that names its lines.
    """
    found: list[tuple[list[str], list[int]]] = []

    def walk(current: yaml.Node, path: list[str]) -> None:
        if isinstance(current, yaml.MappingNode):
            seen: dict[str, list[int]] = defaultdict(list)
            for key, value in current.value:
                name = str(key.value)
                seen[name].append(key.start_mark.line + 1)
                walk(value, [*path, name])
            found.extend(([*path, k], lines) for k, lines in seen.items() if len(lines) > 1)
        elif isinstance(current, yaml.SequenceNode):
            for index, item in enumerate(current.value):
                walk(item, [*path, str(index)])

    if node is not None:
        walk(node, [])
    return found


def _duplicate_message(duplicate: tuple[list[str], list[int]]) -> str:
    keys, lines = duplicate
    return (
        f"key {keys[-1]!r} appears {len(lines)} times (lines {', '.join(map(str, lines))}); "
        "YAML would silently keep the last one"
    )


def parse_policy(name: str, raw: Any) -> tuple[Policy | None, list[PolicyProblem]]:
    """Validate one policy mapping; return the policy or the list of problems."""
    if not isinstance(raw, dict):
        return None, [PolicyProblem(name, "*", "a policy must be a mapping of fields")]
    if "name" in raw:
        return None, [PolicyProblem(name, "name", _unknown_field(Policy))]
    try:
        return Policy.model_validate({**raw, "name": name}), []
    except ValidationError as invalid:
        return None, [_problem(name, error) for error in invalid.errors(include_url=False)]


def _known_fields(model: type[BaseModel]) -> list[str]:
    return [f for f in model.model_fields if f != "name"]


def _unknown_field(model: type[BaseModel]) -> str:
    return f"unknown field; known fields are {', '.join(_known_fields(model))}"


_SECTIONS: dict[str, type[BaseModel]] = {
    "remote": RemoteSpec,
    "notify": NotifySpec,
    "alerts": AlertsSpec,
}


def _problem(name: str, error: Any) -> PolicyProblem:
    """Turn one pydantic error into ``policy 'x', field 'y': message`` with our wording."""
    loc = [str(part) for part in error["loc"]]
    ctx = error.get("ctx") or {}
    cause = ctx.get("error")
    if isinstance(cause, PolicyRuleError):  # raised by a section's validator: prefix its path
        return PolicyProblem(name, ".".join([*loc, cause.field]), cause.message)
    item = ""
    if len(loc) >= 2 and loc[-1].isdigit():  # an item of a list (tags)
        item = f"item {loc[-1]}: "
        loc = loc[:-1]
    where = ".".join(loc) or "*"
    value = error.get("input")
    kind = error["type"]
    model = _SECTIONS.get(loc[0], Policy) if len(loc) > 1 else Policy
    messages = {  # every error type strict models raise for YAML input (see test_policy)
        "missing": "required field is missing",
        "extra_forbidden": _unknown_field(model),
        "int_type": f"must be a whole number, got {value!r}",
        "float_type": f"must be a number, got {value!r}",
        "finite_number": f"must be a finite number, got {value!r}",
        "greater_than": f"must be greater than {ctx.get('gt')}, got {value!r}",
        "greater_than_equal": f"must be at least {ctx.get('ge')}, got {value!r}",
        "less_than_equal": f"must be at most {ctx.get('le')}, got {value!r}",
        "bool_type": f"must be true or false, got {value!r}",
        "string_type": f"must be a string, got {value!r}",
        "string_too_short": "must be a non-empty string",
        "string_too_long": f"must be at most {ctx.get('max_length')} characters",
        "too_long": f"must be at most {ctx.get('max_length')} "
        + ("characters" if isinstance(value, str) else "items"),
        "literal_error": f"must be one of {ctx.get('expected')}, got {value!r}",
        "model_type": "must be a mapping of fields",
        "tuple_type": "must be a list",
        "value_error": str(cause),
    }
    return PolicyProblem(name, where, item + messages.get(kind, error["msg"]))


def limiter_scope_conflicts(policies: list[Policy]) -> list[PolicyProblem]:
    """Policies sharing a limiter scope must agree on its bucket and its database.

    The scope is one row of ``retention.rate_limiters`` in one database: two
    policies with different rates would overwrite each other's ceiling, and two
    databases would hold two buckets that together exceed the API's limit. The
    first policy of a scope in the file defines it; a later one that disagrees
    is the problem, so adding a policy never takes an existing DAG away.
    """
    first: dict[str, Policy] = {}
    problems: list[PolicyProblem] = []
    for policy in policies:
        if policy.remote is None:
            continue
        scope = policy.remote.scope
        owner = first.setdefault(scope, policy)
        if owner is policy:
            continue
        differences = [
            f"{label} {mine!r} (policy {owner.name!r} has {theirs!r})"
            for label, mine, theirs in _bucket_shape(policy, owner)
            if mine != theirs
        ]
        if differences:
            problems.append(
                PolicyProblem(
                    policy.name,
                    "remote.limiter_scope",
                    f"scope {scope!r} is defined by policy {owner.name!r}; this policy "
                    f"disagrees on {'; '.join(differences)}. Policies sharing a scope must "
                    "use the same rate_per_second (and max_rate_per_second), burst, "
                    "recovery_seconds and postgres_conn_id, or name different scopes",
                )
            )
    return problems


def _bucket_shape(policy: Policy, owner: Policy) -> list[tuple[str, Any, Any]]:
    mine, theirs = policy.remote, owner.remote
    assert mine is not None
    assert theirs is not None
    return [
        ("rate_per_second", mine.rate_per_second, theirs.rate_per_second),
        ("max_rate_per_second", mine.max_rate_per_second, theirs.max_rate_per_second),
        ("burst", mine.burst, theirs.burst),
        ("recovery_seconds", mine.recovery_seconds, theirs.recovery_seconds),
        ("postgres_conn_id", policy.postgres_conn_id, owner.postgres_conn_id),
    ]


def declared_pools(settings: Path) -> dict[str, int] | None:
    """Pools in ``airflow_settings.yaml`` and their slots (0 when not a whole number);
    None when the file is absent or unreadable."""
    try:
        document = yaml.safe_load(settings.read_text())
    except (OSError, yaml.YAMLError):
        return None
    airflow = document.get("airflow") if isinstance(document, dict) else None
    pools = airflow.get("pools") if isinstance(airflow, dict) else None
    if not isinstance(pools, list):
        return None
    return {
        str(p.get("pool_name")): p["pool_slot"] if type(p.get("pool_slot")) is int else 0
        for p in pools
        if isinstance(p, dict)
    }


def pool_warnings(policies: list[Policy], settings: Path) -> dict[str, list[str]]:
    """Warnings for the DAG docs: pools that no settings file creates, and unused fields.

    Pools are created in the Airflow UI or API in production, so a pool missing
    from ``airflow_settings.yaml`` cannot be an error; a task in a pool that does
    not exist is never scheduled, so it is worth saying loudly.
    """
    known = declared_pools(settings)
    warnings: dict[str, list[str]] = {}
    for policy in policies:
        notes: list[str] = []
        used = [("remote.pool", policy.remote.pool)] if policy.remote else [("pool", policy.pool)]
        if policy.notify is not None:
            used.append(("notify.pool", policy.notify.pool))
        for field_name, pool in used:
            if known is not None and pool != DEFAULT_POOL and pool not in known:
                notes.append(
                    f"`{field_name}` names pool `{pool}`, which {settings.name} does not "
                    "create: create it (Admin → Pools) or its tasks are never scheduled."
                )
        if policy.remote is not None and policy.pool != DEFAULT_POOL:
            notes.append(
                f"`pool` (`{policy.pool}`) is unused: a remote policy's windows and drain "
                f"run in `remote.pool` (`{policy.remote.pool}`)."
            )
        if notes:
            warnings[policy.name] = notes
    return warnings
