"""Derivative objects (``remote.derivatives``): the pure rules, tested as tables."""

from __future__ import annotations

import hashlib

import pytest

from retention.objects.finish import all_resources_confirmed
from retention.objects.keys import Operation, derivative_key, safe_endpoint
from retention.policy.model import MAIN_RESOURCE, RemoteSpec
from tests.support.policies import REQUIRED_REMOTE


def remote(**fields) -> RemoteSpec:
    return RemoteSpec.model_validate({**REQUIRED_REMOTE, **fields}, strict=False)


@pytest.mark.parametrize(
    ("states", "row_may_go"),
    [
        ({"object": "done"}, False),  # thumbnails and transcodes were never enqueued
        ({"object": "done", "thumbnails": "done"}, False),
        ({"object": "done", "thumbnails": "done", "transcodes": "done"}, True),
        ({"object": "done", "thumbnails": "pending", "transcodes": "done"}, False),
        ({"object": "done", "thumbnails": "in_flight"}, False),
        ({"object": "done", "thumbnails": "dead"}, False),
        ({"object": "pending", "thumbnails": "done"}, False),
        ({"object": "dead", "thumbnails": "done"}, False),
        ({}, False),
    ],
)
def test_a_row_goes_only_when_every_resource_of_its_object_is_confirmed(
    states: dict[str, str], row_may_go: bool
) -> None:
    """The policy names the object, thumbnails and transcodes: each must be confirmed."""
    named = ("object", "thumbnails", "transcodes")
    assert all_resources_confirmed(states, named) is row_may_go


def test_a_policy_without_derivatives_needs_its_object_only() -> None:
    assert all_resources_confirmed({"object": "done"}, ("object",)) is True
    assert all_resources_confirmed({"object": "pending"}, ("object",)) is False


def test_a_derivatives_key_is_derived_from_its_objects_key_and_its_name() -> None:
    object_key = "ab" * 32
    assert derivative_key(object_key, "thumbnails") == (
        hashlib.sha256(f"{object_key}|thumbnails".encode()).hexdigest()
    )
    assert derivative_key(object_key, "thumbnails") != derivative_key(object_key, "transcodes")
    assert derivative_key(object_key, "thumbnails") != object_key


def test_each_resource_has_its_own_call_and_inherits_not_found_is_deleted() -> None:
    spec = remote(
        endpoint="/v1/assets/{object_id}",
        not_found_is_deleted=False,
        derivatives=[
            {"name": "thumbnails", "endpoint": "/v1/assets/{object_id}/thumbnails"},
            {
                "name": "transcodes",
                "endpoint": "/v1/transcodes/{object_id}",
                "method": "post",
                "not_found_is_deleted": True,
            },
        ],
    )
    assert spec.resources == (MAIN_RESOURCE, "thumbnails", "transcodes")
    assert spec.call_of(MAIN_RESOURCE) == ("/v1/assets/{object_id}", "DELETE", False)
    assert spec.call_of("thumbnails") == ("/v1/assets/{object_id}/thumbnails", "DELETE", False)
    assert spec.call_of("transcodes") == ("/v1/transcodes/{object_id}", "POST", True)
    with pytest.raises(KeyError):
        spec.call_of("posters")


def test_a_derivative_is_sent_to_its_own_endpoint() -> None:
    spec = remote(
        endpoint="/v1/assets/{object_id}",
        derivatives=[{"name": "thumbnails", "endpoint": "/v1/assets/{object_id}/thumbnails"}],
    )
    base = {
        "operation_key": "k",
        "row_key": 7,
        "object_id": "a/b",
        "tenant": None,
        "version": "1",
        "window_key": None,
        "attempt_count": 0,
        "claim_count": 1,
        "auth_failure_count": 0,
    }
    thumbnails = Operation(**base, resource="thumbnails", parent_key="p")
    assert safe_endpoint(spec, Operation(**base)) == ("/v1/assets/a%2Fb", "")
    assert safe_endpoint(spec, thumbnails) == ("/v1/assets/a%2Fb/thumbnails", "")
    assert thumbnails.object_key == "p"
    assert thumbnails.described.startswith("thumbnails of object 'a/b', row 7")
