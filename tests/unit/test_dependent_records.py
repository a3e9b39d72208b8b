"""DependentRecords: annotation-linked dependents recorded on their owner, and the cleanup finalizer held for them
(a fake API server object in memory; the integration tests run them on a cluster)."""

from __future__ import annotations

import asyncio
import copy
import json
from typing import Any

import pytest

from runner.config import GVK, RECORDED_DEPENDENTS_ANNOTATION
from runner.dependents import CLEANUP_FINALIZER, DependentRecords
from runner.kube import ApiError, NotFound
from runner.ownership import Owner, Target

OWNER = Owner("example.com/v1", "Widget", "w", "ns", "uid-w", GVK("example.com", "v1", "Widget"))
ROLE = Target(GVK("rbac.authorization.k8s.io", "v1", "ClusterRole"), "clusterroles", False)


class FakeKube:
    """One owner object; a merge patch that names a resourceVersion other than the current one is refused (409),
    and ``conflicts`` more patches are refused as if someone else wrote first."""

    def __init__(self, meta: dict[str, Any], conflicts: int = 0) -> None:
        self.obj: dict[str, Any] | None = {"metadata": {"name": "w", "namespace": "ns", "uid": "uid-w",
                                                         "resourceVersion": "1", **meta}}
        self.conflicts = conflicts
        self.patches: list[dict[str, Any]] = []

    async def get_or_none(self, _res: Any, _ns: str, _name: str) -> dict[str, Any] | None:
        return copy.deepcopy(self.obj)

    async def patch(self, _res: Any, _ns: str, _name: str, body: dict[str, Any]) -> dict[str, Any]:
        assert self.obj is not None
        self.patches.append(body)
        meta = self.obj["metadata"]
        if self.conflicts:
            self.conflicts -= 1
            meta["resourceVersion"] = str(int(meta["resourceVersion"]) + 1)
            raise ApiError(409, "Conflict", "the object has been modified")
        if body["metadata"].get("resourceVersion") != meta["resourceVersion"]:
            raise ApiError(409, "Conflict", "the object has been modified")
        if "finalizers" in body["metadata"]:
            if meta.get("deletionTimestamp") and set(body["metadata"]["finalizers"]) - set(meta.get("finalizers") or []):
                raise ApiError(422, "Invalid", "no new finalizers can be added if the object is being deleted")
            meta["finalizers"] = body["metadata"]["finalizers"]
        meta.setdefault("annotations", {}).update(body["metadata"].get("annotations") or {})
        meta["resourceVersion"] = str(int(meta["resourceVersion"]) + 1)
        return copy.deepcopy(self.obj)


def records(kube: FakeKube) -> DependentRecords:
    async def resource_of(_gvk: GVK) -> Any:
        return None
    return DependentRecords(kube, resource_of)  # type: ignore[arg-type]


def recorded_uids(kube: FakeKube) -> list[str]:
    assert kube.obj is not None
    raw = (kube.obj["metadata"].get("annotations") or {}).get(RECORDED_DEPENDENTS_ANNOTATION) or "[]"
    return [e["uid"] for e in json.loads(raw)]


def test_a_created_dependent_is_recorded_and_the_owner_holds_the_finalizer() -> None:
    kube = FakeKube({"finalizers": ["other"]})
    asyncio.run(records(kube).record(OWNER, ROLE, {"name": "r", "uid": "uid-r"}))
    assert kube.obj is not None
    assert kube.obj["metadata"]["finalizers"] == ["other", CLEANUP_FINALIZER]
    assert recorded_uids(kube) == ["uid-r"]
    asyncio.run(records(kube).record(OWNER, ROLE, {"name": "r", "uid": "uid-r"}))  # once only
    assert recorded_uids(kube) == ["uid-r"] and len(kube.patches) == 1


def test_hold_adds_the_finalizer_once_and_records_nothing() -> None:
    kube = FakeKube({})
    asyncio.run(records(kube).hold(OWNER))
    asyncio.run(records(kube).hold(OWNER))
    assert kube.obj is not None and kube.obj["metadata"]["finalizers"] == [CLEANUP_FINALIZER]
    assert recorded_uids(kube) == [] and len(kube.patches) == 1


def test_an_owner_being_deleted_that_holds_the_finalizer_still_records_what_a_run_under_way_creates() -> None:
    kube = FakeKube({"deletionTimestamp": "2026-11-27T10:00:00Z", "finalizers": [CLEANUP_FINALIZER]})
    asyncio.run(records(kube).hold(OWNER))
    asyncio.run(records(kube).record(OWNER, ROLE, {"name": "r", "uid": "uid-r"}))
    assert recorded_uids(kube) == ["uid-r"]


@pytest.mark.parametrize("call", ["hold", "record"])
def test_an_owner_being_deleted_without_the_finalizer_is_refused_not_patched(call: str) -> None:
    kube = FakeKube({"deletionTimestamp": "2026-11-27T10:00:00Z"})
    r = records(kube)
    with pytest.raises(ApiError) as refused:
        asyncio.run(r.hold(OWNER) if call == "hold" else r.record(OWNER, ROLE, {"name": "r", "uid": "uid-r"}))
    assert refused.value.status == 409 and "is being deleted" in str(refused.value)
    assert kube.patches == []


def test_a_conflict_is_retried_on_the_fresh_object() -> None:
    kube = FakeKube({}, conflicts=2)
    asyncio.run(records(kube).record(OWNER, ROLE, {"name": "r", "uid": "uid-r"}))
    assert recorded_uids(kube) == ["uid-r"] and len(kube.patches) == 3


def test_another_object_of_the_owners_name_is_not_the_owner() -> None:
    kube = FakeKube({})
    assert kube.obj is not None
    kube.obj["metadata"]["uid"] = "uid-other"
    with pytest.raises(NotFound):
        asyncio.run(records(kube).hold(OWNER))
    assert kube.patches == []
