"""What one remote operation is: its stable key, its claimed fields, and the paths it may use.

An operation is keyed by ``sha256(policy | revision | table | row key |
version)``, the same key the ledger's SQL derives, so re-enqueueing a window
never makes a second operation for a row. That is the key of the object itself;
each derivative of the object (``remote.derivatives``) is its own operation,
keyed ``sha256(object key | resource name)``, so the object's key, and every
ledger and event keyed by it, stays what it was before derivatives existed.
Before any transport uses an object id or a tenant as a path segment,
:func:`bad_path_value` says whether it can be one; :func:`safe_endpoint` renders
a resource's HTTP endpoint only when the result keeps the template's shape.
Pure: no database, no network.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from functools import cache
from typing import Any
from urllib.parse import quote

from retention.policy.model import MAIN_RESOURCE, RemoteSpec

LOCAL_DELETE_PENDING = "local_delete_pending"  # failure_class: confirmed, row delete left
MAX_ID_BYTES = 1024
CONTROL_CHARACTERS = re.compile(r"[\x00-\x1f\x7f]")


def operation_key(policy: str, revision: int, table: str, row_key: int, version: str) -> str:
    """The same key the ledger's SQL derives (``TargetTable.operation_key_expr``)."""
    text = "|".join((policy, str(revision), table, str(row_key), version))
    return hashlib.sha256(text.encode()).hexdigest()


def derivative_key(object_key: str, resource: str) -> str:
    """The key of one derivative of an object, as ``ops_enqueue_derivatives.sql`` derives it."""
    return hashlib.sha256(f"{object_key}|{resource}".encode()).hexdigest()


@dataclass(frozen=True)
class Operation:
    """An operation this worker holds a lease on."""

    operation_key: str
    row_key: int
    object_id: str
    tenant: str | None
    version: str
    window_key: str | None
    attempt_count: int
    claim_count: int
    auth_failure_count: int
    failure_class: str | None = None
    last_status_code: int | None = None
    resource: str = MAIN_RESOURCE
    parent_key: str | None = None
    # 'urgent' for an erasure's operation: it is judged against no cutoff (an erasure
    # ignores retain_days); 'routine' for every other.
    priority: str = "routine"

    @property
    def key(self) -> str:
        return self.operation_key

    @property
    def object_key(self) -> str:
        """The key of the object this operation deletes a resource of."""
        return self.parent_key or self.operation_key

    @property
    def described(self) -> str:
        """``object 'obj-7', row 7, key 3f1c…`` (the whole key): what log lines name; a
        derivative's lines name it first (``thumbnails of object 'obj-7', …``)."""
        what = "" if self.resource == MAIN_RESOURCE else f"{self.resource} of "
        return f"{what}object {self.object_id!r}, row {self.row_key}, key {self.operation_key}"

    @property
    def local_delete_pending(self) -> bool:
        """The remote confirmed; only the local delete is left (it failed for a moment)."""
        return self.failure_class == LOCAL_DELETE_PENDING

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Operation:
        return cls(**{name: row[name] for name in cls.__dataclass_fields__ if name in row})


def bad_path_value(value: str | None) -> str | None:
    """Why an object id or tenant cannot be a path segment (None when it can).

    URL-encoding leaves ``.`` and ``..`` as they are, and an empty segment
    collapses the path: each would send the call to a parent resource, whose
    404 would then count as a confirmed deletion.
    """
    if value is None or value == "":
        return "is empty"
    if value in (".", ".."):
        return f"is the dot segment {value!r}"
    if CONTROL_CHARACTERS.search(value):
        return "contains control characters"
    if len(value.encode()) > MAX_ID_BYTES:
        return f"is longer than {MAX_ID_BYTES} bytes"
    return None


def endpoint_for(endpoint: str, object_id: str, tenant: str | None) -> str:
    """An endpoint template with ``{object_id}`` and ``{tenant_id}`` URL-encoded."""
    return endpoint.format(
        object_id=quote(str(object_id), safe=""), tenant_id=quote(str(tenant or ""), safe="")
    )


@cache
def _endpoint_shape(endpoint: str) -> tuple[str, int]:
    """An endpoint template's fixed prefix and its number of ``/`` once filled in."""
    return endpoint.split("{", 1)[0], endpoint.format(object_id="x", tenant_id="x").count("/")


def safe_endpoint(remote: RemoteSpec, op: Operation) -> tuple[str | None, str]:
    """The endpoint of one operation (of its resource), or None and why it must not be called."""
    endpoint = remote.call_of(op.resource)[0]
    checks = [("object id", op.object_id)]
    if "{tenant_id}" in endpoint:
        checks.append(("tenant", op.tenant))
    for what, value in checks:
        problem = bad_path_value(value)
        if problem:
            return None, f"the {what} {problem}; no request was made"
    path = endpoint_for(endpoint, op.object_id, op.tenant)
    prefix, slashes = _endpoint_shape(endpoint)
    if not path.startswith(prefix) or path.count("/") != slashes:
        return None, f"the rendered path {path[:200]!r} leaves the endpoint's shape"
    return path, ""
