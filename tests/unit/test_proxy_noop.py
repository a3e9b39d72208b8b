"""The proxy's no-op patch test: a patch that changes nothing is answered without a write."""

from __future__ import annotations

from runner.proxy import patch_is_noop

CURRENT = {"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": "cm", "namespace": "ns", "resourceVersion": "42", "labels": {"a": "1"},
                        "ownerReferences": [{"apiVersion": "x/v1", "kind": "Bench", "name": "b", "uid": "u",
                                             "controller": True, "blockOwnerDeletion": True}]},
           "data": {"value": "x", "other": "y"}}


def test_what_is_already_there_is_a_noop() -> None:
    patch = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm", "namespace": "ns",
             "ownerReferences": CURRENT["metadata"]["ownerReferences"]}, "data": {"value": "x"}}
    assert patch_is_noop(patch, CURRENT)


def test_any_difference_is_a_write() -> None:
    assert not patch_is_noop({"data": {"value": "z"}}, CURRENT)  # a new value
    assert not patch_is_noop({"data": {"new": "x"}}, CURRENT)  # a new key
    assert not patch_is_noop({"data": {"other": None}}, CURRENT)  # a deletion
    assert not patch_is_noop({"metadata": {"labels": {"a": "1"}, "$retainKeys": ["a"]}}, CURRENT)  # a directive
    assert not patch_is_noop({"metadata": {"ownerReferences": []}}, CURRENT)  # lists must be equal
    assert not patch_is_noop({"metadata": {"resourceVersion": "41"}}, CURRENT)  # a stale write must reach the API
    assert not patch_is_noop({"data": "x"}, CURRENT)
