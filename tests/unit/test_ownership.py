"""Which writes link an object to the run's object (owner references, primary-resource annotations)."""

from __future__ import annotations

from runner.config import GVK
from runner.ownership import APPLY_PATCH, Link, Owner, Target, decide, with_link

OWNER = Owner("example.com/v1", "Widget", "w", "team-a", "uid-w", GVK("example.com", "v1", "Widget"))
CONFIGMAPS = Target(GVK("", "v1", "ConfigMap"), "configmaps", True)
NAMESPACES = Target(GVK("", "v1", "Namespace"), "namespaces", False)
JSON, MERGE, STRATEGIC = "application/json", "application/merge-patch+json", "application/strategic-merge-patch+json"
OURS = {"ownerReferences": [OWNER.reference]}
ANNOTATED = {"annotations": dict(OWNER.annotations)}
THEIRS = {"ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "s", "uid": "uid-s",
                               "controller": True}]}


def test_what_a_run_creates_is_linked() -> None:
    assert decide("POST", JSON, {}, None, OWNER, CONFIGMAPS, "team-a") is Link.REFERENCE
    assert decide("POST", JSON, {}, None, OWNER, CONFIGMAPS, "team-b") is Link.ANNOTATIONS
    assert decide("POST", JSON, {}, None, OWNER, NAMESPACES, "") is Link.ANNOTATIONS
    assert decide("PATCH", APPLY_PATCH, {}, None, OWNER, CONFIGMAPS, "team-a") is Link.REFERENCE  # apply creates


def test_what_a_run_only_changes_keeps_its_owners() -> None:
    for ctype in (JSON, MERGE, STRATEGIC, "application/json-patch+json"):
        assert decide("PATCH", ctype, {}, {}, OWNER, CONFIGMAPS, "team-a") is None
        assert decide("PATCH", ctype, {}, THEIRS, OWNER, CONFIGMAPS, "team-a") is None
    assert decide("PATCH", APPLY_PATCH, {}, {}, OWNER, CONFIGMAPS, "team-a") is None  # applied over an existing one
    assert decide("PATCH", APPLY_PATCH, {}, THEIRS, OWNER, CONFIGMAPS, "team-a") is None
    assert decide("PUT", JSON, {}, {}, OWNER, NAMESPACES, "") is None
    assert decide("PUT", JSON, {}, None, OWNER, CONFIGMAPS, "team-a") is None


def test_an_apply_or_put_of_what_a_run_created_keeps_the_link() -> None:
    assert decide("PATCH", APPLY_PATCH, {}, OURS, OWNER, CONFIGMAPS, "team-a") is Link.REFERENCE
    assert decide("PUT", JSON, {}, OURS, OWNER, CONFIGMAPS, "team-a") is Link.REFERENCE
    assert decide("PATCH", APPLY_PATCH, {}, ANNOTATED, OWNER, NAMESPACES, "") is Link.ANNOTATIONS


def test_an_object_created_with_another_owner_is_left_as_written() -> None:
    assert decide("POST", JSON, THEIRS, None, OWNER, CONFIGMAPS, "team-a") is None


def test_a_kept_reference_is_written_as_the_object_has_it() -> None:
    live = {"ownerReferences": [{**OWNER.reference, "controller": False}]}
    obj = with_link({"metadata": {}}, OWNER, Link.REFERENCE, live)
    assert obj["metadata"]["ownerReferences"] == live["ownerReferences"]
    fresh = with_link({"metadata": {"ownerReferences": THEIRS["ownerReferences"]}}, OWNER, Link.REFERENCE)
    assert [r["uid"] for r in fresh["metadata"]["ownerReferences"]] == ["uid-s", "uid-w"]


def test_a_cluster_scoped_owner_references_what_it_creates_anywhere() -> None:
    cluster_owner = Owner("example.com/v1", "Platform", "p", "", "uid-p", GVK("example.com", "v1", "Platform"))
    assert decide("POST", JSON, {}, None, cluster_owner, CONFIGMAPS, "team-a") is Link.REFERENCE
    assert decide("POST", JSON, {}, None, cluster_owner, NAMESPACES, "") is Link.REFERENCE
