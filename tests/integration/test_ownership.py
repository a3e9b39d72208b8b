"""Own only what you create: owner references and the primary-resource annotations go on objects a run
creates, never on objects it only changes; the runtime deletes exactly the annotation-linked dependents it
recorded at their creation, and says so on the owner when it cannot."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest

from tests.kube import Kube, ServiceAccountAccess, gone, wait_for
from tests.operator import Widgets, kind_rules, widget_watch

PRIMARY = ("operator-sdk/primary-resource", "operator-sdk/primary-resource-type")


@pytest.fixture
def other_namespace(kube: Kube) -> Iterator[str]:
    name = f"t-other-{uuid.uuid4().hex[:6]}"
    kube.core.create_namespace({"metadata": {"name": name}})
    yield name
    kube.core.delete_namespace(name)


def test_objects_a_role_only_patches_are_not_adopted(kube: Kube, namespace: str, widgets: Widgets,
                                                     start_operator) -> None:
    """A role that labels its CR's namespace and adds a key to a user's ConfigMap (state: patched): deleting
    the CR leaves both as they were, owners and annotations included."""
    kube.core.create_namespaced_config_map(namespace, {"metadata": {"name": "user-settings",
                                                                    "annotations": {"owner": "a user"}},
                                                       "data": {"theirs": "1"}})
    start_operator([widget_watch(watchClusterScopedResources=True)])
    widgets.create("toucher", {"labelNamespace": True, "patchConfigmap": "user-settings"})
    widgets.wait_successful("toucher")
    ns = kube.core.read_namespace(namespace).metadata
    cm = kube.core.read_namespaced_config_map("user-settings", namespace)
    assert ns.labels["widgets.test.playbook-operator.dev/labelled-by"] == "toucher"  # the role did its work
    assert cm.data == {"theirs": "1", "from-widget": "hello"}
    assert not ns.owner_references and not set(PRIMARY) & set(ns.annotations or {})
    assert not cm.metadata.owner_references and cm.metadata.annotations == {"owner": "a user"}
    assert widgets.get("toucher")["metadata"].get("finalizers") is None  # nothing for the runtime to clean up

    widgets.delete("toucher")
    wait_for("the Widget to go", lambda: not widgets.exists("toucher"), timeout=60)
    time.sleep(5)  # garbage collection and the runtime's cleanup would have acted by now
    ns = kube.core.read_namespace(namespace)
    assert ns.status.phase == "Active" and not ns.metadata.deletion_timestamp
    cm = kube.core.read_namespaced_config_map("user-settings", namespace)
    assert cm.data == {"theirs": "1", "from-widget": "hello"} and not cm.metadata.owner_references


def test_a_strategic_merge_patch_of_an_object_with_a_controller_succeeds(kube: Kube, namespace: str,
                                                                         widgets: Widgets, start_operator) -> None:
    """No second controller reference: the API server would refuse the patch (422)."""
    controller = kube.core.create_namespaced_config_map(namespace, {"metadata": {"name": "controller"}})
    ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": "controller", "uid": controller.metadata.uid,
           "controller": True}
    kube.core.create_namespaced_config_map(namespace, {"metadata": {"name": "controlled", "ownerReferences": [ref]}})
    start_operator([widget_watch()])
    widgets.create("patcher", {"patchConfigmap": "controlled", "patchMergeType": "strategic-merge"})
    widgets.wait_successful("patcher")
    cm = kube.core.read_namespaced_config_map("controlled", namespace)
    assert cm.data == {"from-widget": "hello"}
    assert [(r.name, r.controller) for r in cm.metadata.owner_references] == [("controller", True)]


def test_server_side_apply_keeps_the_owner_reference_of_what_it_created(kube: Kube, namespace: str,
                                                                        widgets: Widgets, start_operator) -> None:
    start_operator([widget_watch()])
    owner = widgets.create("applier", {"serverSideApply": True, "message": "first"})
    widgets.wait_successful("applier")
    widgets.patch("applier", {"spec": {"message": "second"}})
    widgets.wait_successful("applier", generation=2)
    cm = kube.core.read_namespaced_config_map("applier-applied", namespace)
    assert cm.data == {"message": "second"}
    assert [r.uid for r in cm.metadata.owner_references] == [owner["metadata"]["uid"]]
    widgets.delete("applier")
    wait_for("garbage collection of the applied ConfigMap",
             lambda: gone(lambda: kube.core.read_namespaced_config_map("applier-applied", namespace)), timeout=60)


def test_a_cleanup_that_is_refused_says_why_on_the_owner(kube: Kube, namespace: str, other_namespace: str,
                                                         widgets: Widgets, service_account: ServiceAccountAccess,
                                                         start_operator) -> None:
    """An operator that may create ConfigMaps anywhere but not delete them in another namespace: the CR stays
    (its dependent would be left behind), and its Event and Failure condition say why, until it may."""
    service_account.grant("widgets", kind_rules("test.playbook-operator.dev"))
    service_account.grant("basics", [
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch", "create", "patch", "update"]},
        {"apiGroups": [""], "resources": ["events"], "verbs": ["*"]}])
    op = start_operator([widget_watch()], env=service_account.env())
    widgets.create("far", {"otherNamespace": other_namespace})
    widgets.wait_successful("far")
    remote = kube.core.read_namespaced_config_map("far-remote", other_namespace)
    assert remote.metadata.annotations["operator-sdk/primary-resource"] == f"{namespace}/far"

    widgets.delete("far")
    failure = widgets.wait_condition("far", "Failure", "True", timeout=60)
    message = next(c for c in failure["status"]["conditions"] if c["type"] == "Failure")["message"]
    assert f"{other_namespace}/far-remote" in message and "403" in message, message
    reasons = [e.reason for e in kube.core.list_namespaced_event(namespace).items
               if e.involved_object.name == "far"]
    assert "CleanupFailed" in reasons, reasons
    assert widgets.exists("far") and kube.core.read_namespaced_config_map("far-remote", other_namespace)

    service_account.grant("delete-configmaps", [{"apiGroups": [""], "resources": ["configmaps"],
                                                 "verbs": ["delete"]}])
    wait_for("the Widget to go once its dependent may be deleted", lambda: not widgets.exists("far"), timeout=120)
    assert gone(lambda: kube.core.read_namespaced_config_map("far-remote", other_namespace))
    assert "deleted 1 annotation-linked dependent(s)" in op.logs()
