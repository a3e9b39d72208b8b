"""The runtime on the real cluster: a role that creates a ConfigMap from the spec and sets custom status."""

from __future__ import annotations

import pytest

from tests.kube import Kube, wait_for
from tests.operator import Widgets, widget_watch


@pytest.mark.parametrize("executor", ["warm", "cold"])
def test_converges_on_create_edit_and_after_a_failure_is_fixed(
        executor: str, kube: Kube, namespace: str, widgets: Widgets, start_operator) -> None:
    op = start_operator([widget_watch()], "--executor", executor)
    widgets.create("w", {"message": "one", "replicaCount": 2})
    obj = widgets.wait_successful("w", generation=1)
    cm = kube.core.read_namespaced_config_map("w-cm", namespace)  # no namespace in the role: the CR's is the default
    assert cm.data == {"message": "one", "spec_keys": "message,replicaCount"}
    st = obj["status"]
    assert st["configMap"] == "w-cm" and st["message"] == "one"  # written by the role through k8s_status
    running = next(c for c in st["conditions"] if c["type"] == "Running")
    assert running["reason"] == "Successful" and running["message"] == "Awaiting next reconciliation"
    assert running["ansibleResult"]["failures"] == 0 and running["ansibleResult"]["changed"] >= 1

    widgets.patch("w", {"spec": {"message": "two"}})
    widgets.wait_successful("w", generation=2)
    assert kube.core.read_namespaced_config_map("w-cm", namespace).data["message"] == "two"

    widgets.patch("w", {"spec": {"fail": True, "failMessage": "disk full on purpose"}})
    obj = widgets.wait_condition("w", "Failure", "True")
    failure = next(c for c in obj["status"]["conditions"] if c["type"] == "Failure")
    assert failure["reason"] == "Failed" and failure["message"] == "disk full on purpose"
    assert failure["ansibleResult"]["failures"] == 1
    assert obj["status"]["message"] == "two"  # custom status survives the runtime's condition writes
    events = wait_for("a ReconcileFailed event", lambda: [
        e for e in kube.core.list_namespaced_event(namespace).items
        if e.involved_object.name == "w" and e.reason == "ReconcileFailed"])
    assert events[0].type == "Warning" and "disk full on purpose" in events[0].message

    widgets.patch("w", {"spec": {"fail": False}})
    widgets.wait_successful("w", generation=4)
    assert widgets.condition("w", "Failure")["status"] == "False"
    wait_for("a ReconcileSucceeded event", lambda: [
        e for e in kube.core.list_namespaced_event(namespace).items
        if e.involved_object.name == "w" and e.reason == "ReconcileSucceeded"])
    assert "task 'Refuse when told to' failed: disk full on purpose" in op.logs()
