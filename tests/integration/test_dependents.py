"""Owned dependents: owner references and annotations injected by the runtime's API proxy, dependent
watches that bring the owner back, garbage collection and the runtime's own cleanup."""

from __future__ import annotations

import re
import time
import uuid

from kubernetes import client

from tests.kube import Kube, gone, wait_for
from tests.operator import FAST_PODS, Widgets, fresh_kind, widget_watch


def test_owned_dependents_come_back_and_go_with_their_owner(kube: Kube, namespace: str, widgets: Widgets,
                                                           start_operator) -> None:
    op = start_operator([widget_watch()])
    w = widgets.create("own", {"message": "mine"})
    widgets.wait_successful("own")
    cm = kube.core.read_namespaced_config_map("own-cm", namespace)
    (ref,) = cm.metadata.owner_references  # the role never mentions owners: the runtime added it
    assert (ref.kind, ref.name, ref.uid, ref.controller, ref.block_owner_deletion) == (
        "Widget", "own", w["metadata"]["uid"], True, True)

    kube.core.delete_namespaced_config_map("own-cm", namespace)
    wait_for("the deleted ConfigMap to be recreated",
             lambda: kube.core.read_namespaced_config_map("own-cm", namespace), timeout=30)
    kube.core.patch_namespaced_config_map("own-cm", namespace, {"data": {"message": "tampered"}})
    wait_for("the edited ConfigMap to be restored", lambda: kube.core.read_namespaced_config_map(
        "own-cm", namespace).data["message"] == "mine", timeout=30)
    assert "watching v1, Kind=ConfigMap as a dependent kind" in op.logs()

    widgets.delete("own")
    wait_for("garbage collection of the ConfigMap",
             lambda: gone(lambda: kube.core.read_namespaced_config_map("own-cm", namespace)), timeout=60)


def test_annotated_dependents_are_watched_and_cleaned_up(kube: Kube, namespace: str, widgets: Widgets,
                                                        start_operator) -> None:
    other = f"t-other-{uuid.uuid4().hex[:6]}"
    kube.core.create_namespace({"metadata": {"name": other}})
    try:
        op = start_operator([widget_watch(watchClusterScopedResources=True)])
        widgets.create("far", {"clusterRole": True, "otherNamespace": other})
        widgets.wait_successful("far")
        cr_name = f"widget-{namespace}-far"
        role = kube.rbac.read_cluster_role(cr_name)
        assert role.metadata.annotations["operator-sdk/primary-resource"] == f"{namespace}/far"
        assert role.metadata.annotations["operator-sdk/primary-resource-type"] == "Widget.test.playbook-operator.dev"
        assert not role.metadata.owner_references
        remote = kube.core.read_namespaced_config_map("far-remote", other)
        assert remote.metadata.annotations["operator-sdk/primary-resource"] == f"{namespace}/far"
        # a cluster-scoped dependent is watched (watchClusterScopedResources) and recreated
        kube.rbac.delete_cluster_role(cr_name)
        wait_for("the ClusterRole to be recreated", lambda: kube.rbac.read_cluster_role(cr_name), timeout=30)
        obj = widgets.get("far")
        assert "playbook-operator.dev/cleanup-annotated-dependents" in obj["metadata"]["finalizers"]
        # deleting the owner deletes what garbage collection cannot (no ownerReference across scopes), also what a
        # run under way when it was deleted creates
        started = len(re.findall(r"run start: Widget \S+/far ", op.logs()))
        widgets.patch("far", {"spec": {"sleep": 6}})
        op.wait_for_log(r"run start: Widget \S+/far ", count=started + 1)
        kube.rbac.delete_cluster_role(cr_name)
        widgets.delete("far")
        wait_for("the Widget to be gone", lambda: not widgets.exists("far"), timeout=60)
        assert gone(lambda: kube.rbac.read_cluster_role(cr_name))
        assert gone(lambda: kube.core.read_namespaced_config_map("far-remote", other))
        assert "deleted 2 annotation-linked dependent(s)" in op.logs()
    finally:
        kube.core.delete_namespace(other)
        try:
            kube.rbac.delete_cluster_role(f"widget-{namespace}-far")
        except client.ApiException:
            pass


def test_an_owner_deleted_during_its_first_run_gets_no_dependent_it_could_not_clean_up(
        kube: Kube, namespace: str, widgets: Widgets, start_operator) -> None:
    """Deleted while its first run is under way (before it holds the cleanup finalizer, which an object being deleted
    can no longer take): the ClusterRole that run would create is refused, not left behind."""
    op = start_operator([widget_watch(watchClusterScopedResources=True)])
    cr_name = f"widget-{namespace}-early"
    try:
        widgets.create("early", {"clusterRole": True, "sleep": 6})
        op.wait_for_log(r"run start: Widget \S+/early ")
        widgets.delete("early")
        wait_for("the Widget to be gone", lambda: not widgets.exists("early"), timeout=60)
        op.wait_for_log(r"run end: Widget \S+/early ")
        assert gone(lambda: kube.rbac.read_cluster_role(cr_name))
        assert "it would outlive its owner Widget" in op.logs()
    finally:
        try:
            kube.rbac.delete_cluster_role(cr_name)
        except client.ApiException:
            pass


def test_without_cluster_scoped_watch_and_with_blacklist(kube: Kube, namespace: str, widgets: Widgets,
                                                         start_operator) -> None:
    op = start_operator([widget_watch(blacklist=[{"group": "", "version": "v1", "kind": "ConfigMap"}])])
    widgets.create("bl", {"clusterRole": True})
    widgets.wait_successful("bl")
    kube.core.delete_namespaced_config_map("bl-cm", namespace)
    kube.rbac.delete_cluster_role(f"widget-{namespace}-bl")
    time.sleep(5)
    assert len(op.runs("bl")) == 1  # neither a blacklisted kind nor an unwatched cluster-scoped one
    assert "as a dependent kind" not in op.logs()
    widgets.delete("bl")
    wait_for("the Widget to be gone", lambda: not widgets.exists("bl"), timeout=60)


def test_dependent_watches_are_relearned_after_a_restart(kube: Kube, namespace: str, widgets: Widgets,
                                                         start_operator) -> None:
    first = start_operator([widget_watch()], name="first")
    widgets.create("r", {"message": "before restart"})
    widgets.wait_successful("r")
    first.stop()
    second = start_operator([widget_watch()], name="second")
    second.wait_for_log("watching v1, Kind=ConfigMap as a dependent kind", timeout=60)
    kube.core.delete_namespaced_config_map("r-cm", namespace)
    wait_for("the ConfigMap (created before the restart) to be recreated",
             lambda: kube.core.read_namespaced_config_map("r-cm", namespace), timeout=30)


def test_inject_owner_ref_false(kube: Kube, namespace: str, widgets: Widgets, start_operator) -> None:
    start_operator([widget_watch()], "--inject-owner-ref=false")
    widgets.create("plain", {})
    widgets.wait_successful("plain")
    assert not kube.core.read_namespaced_config_map("plain-cm", namespace).metadata.owner_references


def _flip_ready(kube: Kube, namespace: str, pod: str) -> None:
    current = kube.core.read_namespaced_pod(pod, namespace).status.conditions or []
    ready = next((c.status for c in current if c.type == "Ready"), "True")
    kube.core.patch_namespaced_pod_status(pod, namespace, {"status": {"conditions": [
        {"type": "Ready", "status": "False" if ready == "True" else "True", "reason": "Test"}]}})


def test_status_changes_of_dependents_bring_the_owner_back_when_the_watch_asks(
        kube: Kube, namespace: str, widgets: Widgets, start_operator) -> None:
    """watchDependentStatusChanges (ours): a Pod the role made turning unready (a status change) runs the owner
    again; without it, as the Go ansible-operator, only spec changes and deletions do."""
    op = start_operator([widget_watch(watchDependentStatusChanges=True, reconcilePeriod="1h",
                                      vars={"pod_annotations": FAST_PODS})])
    widgets.create("st", {"pod": True})
    widgets.wait_successful("st")
    op.wait_for_log("watching v1, Kind=Pod as a dependent kind")
    runs = len(op.runs("st"))

    def flipped_and_run() -> bool:
        # (the pod watch may still be listing: a change it lists rather than sees is not one)
        _flip_ready(kube, namespace, "st-pod")
        return len(op.runs("st")) > runs
    wait_for("a run for the pod's status change", flipped_and_run, timeout=60, interval=3)


def test_without_it_status_changes_of_dependents_do_not(kube: Kube, namespace: str, widgets: Widgets,
                                                        start_operator) -> None:
    op = start_operator([widget_watch(reconcilePeriod="1h", vars={"pod_annotations": FAST_PODS})])
    widgets.create("quiet", {"pod": True})
    widgets.wait_successful("quiet")
    op.wait_for_log("watching v1, Kind=Pod as a dependent kind")
    # a change that matters to the Go operator's rules brings it back: the dependent watches are live
    kube.core.patch_namespaced_config_map("quiet-cm", namespace, {"data": {"message": "tampered"}})
    wait_for("the run for the ConfigMap's change", lambda: len(op.runs("quiet")) == 2, timeout=60)
    for _ in range(3):
        _flip_ready(kube, namespace, "quiet-pod")
        time.sleep(2)
    assert len(op.runs("quiet")) == 2, op.runs("quiet")  # the pod's status changes brought nothing


def test_dependents_of_a_cluster_scoped_owner_bring_it_back(kube: Kube, namespace: str, start_operator) -> None:
    """A cluster-wide kind (a "Platform" CR) owns objects in namespaces: they are its dependents like any other."""
    kind = fresh_kind("Cluster")
    kind.install(kube)
    try:
        op = start_operator([kind.watch(reconcilePeriod="1h")])
        platforms = kind.objects(kube, None)
        name = f"p-{namespace}"
        owner = platforms.create(name, {"targetNamespace": namespace, "message": "cluster-wide"})
        platforms.wait_successful(name)
        cm = kube.core.read_namespaced_config_map(f"{name}-cm", namespace)
        (ref,) = cm.metadata.owner_references
        assert (ref.kind, ref.name, ref.uid) == ("Gizmo", name, owner["metadata"]["uid"])
        op.wait_for_log("watching v1, Kind=ConfigMap as a dependent kind")
        kube.core.patch_namespaced_config_map(f"{name}-cm", namespace, {"data": {"message": "tampered"}})
        wait_for("the edited ConfigMap to be restored", lambda: kube.core.read_namespaced_config_map(
            f"{name}-cm", namespace).data["message"] == "cluster-wide", timeout=30)
        kube.core.delete_namespaced_config_map(f"{name}-cm", namespace)
        wait_for("the deleted ConfigMap to be recreated",
                 lambda: kube.core.read_namespaced_config_map(f"{name}-cm", namespace), timeout=30)
        platforms.delete(name)
        wait_for("garbage collection of the ConfigMap",
                 lambda: gone(lambda: kube.core.read_namespaced_config_map(f"{name}-cm", namespace)), timeout=60)
    finally:
        kind.uninstall(kube)
