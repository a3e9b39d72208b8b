"""The control plane the tests run against is real: each behaviour here is something a mock API server
would not do by itself (schema validation, controllers, scheduling, garbage collection, RBAC, kwok's
simulated kubelet)."""

from __future__ import annotations

import json
import uuid

import pytest
from kubernetes import client, config

from tests.kube import Kube, wait_for

# kwok's stages wait about 1 s (plus jitter) per step; tests shorten them to keep the suite fast.
FAST = {
    "pod-create.stage.kwok.x-k8s.io/delay": "0s",
    "pod-ready.stage.kwok.x-k8s.io/delay": "0s",
    "pod-ready.stage.kwok.x-k8s.io/jitter-delay": "0s",
    "pod-complete.stage.kwok.x-k8s.io/delay": "0s",
    "pod-complete.stage.kwok.x-k8s.io/jitter-delay": "0s",
}


def _container() -> dict:
    return {"name": "main", "image": "example.invalid/app:1"}


def _pod_template(labels: dict[str, str], annotations: dict[str, str] | None = None, restart: str = "Always") -> dict:
    return {"metadata": {"labels": labels, "annotations": {**FAST, **(annotations or {})}},
            "spec": {"containers": [_container()], "restartPolicy": restart}}


def test_crd_schema_refuses_invalid_field_with_its_path(kube: Kube) -> None:
    group = f"g{uuid.uuid4().hex[:8]}.realism.example.com"
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": f"gadgets.{group}"},
        "spec": {"group": group, "scope": "Namespaced",
                 "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget"},
                 "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {
                     "type": "object", "properties": {"spec": {"type": "object", "properties": {
                         "size": {"type": "integer", "minimum": 1, "maximum": 5}}}}}}}]},
    }
    kube.ext.create_custom_resource_definition(crd)
    try:
        wait_for("CRD established", lambda: any(
            c.type == "Established" and c.status == "True"
            for c in (kube.ext.read_custom_resource_definition(f"gadgets.{group}").status.conditions or [])))
        bad = {"apiVersion": f"{group}/v1", "kind": "Gadget", "metadata": {"name": "w"}, "spec": {"size": 9}}

        def apply_bad() -> object:
            proc = kube.kubectl("apply", "-n", "default", "-f", "-", input=json.dumps(bad), check=False)
            # right after the CRD is established, discovery may not list the kind for a moment
            return None if "no matches for kind" in proc.stderr else proc

        proc = wait_for("the new kind to be served", apply_bad)
        assert proc.returncode != 0
        assert "spec.size" in proc.stderr and "should be less than or equal to 5" in proc.stderr
    finally:
        kube.ext.delete_custom_resource_definition(f"gadgets.{group}")


def test_deployment_pods_become_ready(kube: Kube, namespace: str) -> None:
    labels = {"app": "web"}
    kube.apps.create_namespaced_deployment(namespace, {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
        "spec": {"replicas": 2, "selector": {"matchLabels": labels}, "template": _pod_template(labels)}})
    wait_for("2 ready replicas", lambda: kube.apps.read_namespaced_deployment("web", namespace).status.ready_replicas == 2)
    pods = kube.core.list_namespaced_pod(namespace, label_selector="app=web").items
    assert len(pods) == 2
    assert all(p.spec.node_name and p.status.phase == "Running" for p in pods)


def test_statefulset_pods_ready_and_pvcs_bound(kube: Kube, namespace: str) -> None:
    labels = {"app": "db"}
    kube.apps.create_namespaced_stateful_set(namespace, {
        "apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "db"},
        "spec": {"replicas": 2, "serviceName": "db", "selector": {"matchLabels": labels},
                 "podManagementPolicy": "Parallel",
                 "template": _pod_template(labels),
                 "volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": {
                     "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}]}})
    wait_for("2 ready StatefulSet replicas",
             lambda: kube.apps.read_namespaced_stateful_set("db", namespace).status.ready_replicas == 2)

    def bound_pvcs() -> list[client.V1PersistentVolumeClaim] | None:
        pvcs = kube.core.list_namespaced_persistent_volume_claim(namespace).items
        return pvcs if len(pvcs) == 2 and all(p.status.phase == "Bound" for p in pvcs) else None

    pvcs = wait_for("both PVCs bound", bound_pvcs)
    assert sorted(p.metadata.name for p in pvcs) == ["data-db-0", "data-db-1"]
    assert all(p.spec.volume_name for p in pvcs)


def test_job_completes(kube: Kube, namespace: str) -> None:
    kube.batch.create_namespaced_job(namespace, {
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "once"},
        "spec": {"backoffLimit": 0, "template": _pod_template({"job": "once"}, restart="Never")}})
    job = wait_for("the Job to succeed", lambda: (j := kube.batch.read_namespaced_job("once", namespace)).status.succeeded and j)
    assert any(c.type == "Complete" and c.status == "True" for c in job.status.conditions)


def test_cronjob_creates_jobs(kube: Kube, namespace: str) -> None:
    kube.batch.create_namespaced_cron_job(namespace, {
        "apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "tick"},
        "spec": {"schedule": "* * * * *", "jobTemplate": {"spec": {
            "template": _pod_template({"job": "tick"}, restart="Never")}}}})
    # The CronJob controller starts a Job at the next minute boundary.
    jobs = wait_for("a Job created by the CronJob", lambda: kube.batch.list_namespaced_job(namespace).items, timeout=90)
    assert jobs[0].metadata.owner_references[0].kind == "CronJob"
    assert jobs[0].metadata.owner_references[0].name == "tick"


def test_owner_reference_garbage_collection(kube: Kube, namespace: str) -> None:
    owner = kube.core.create_namespaced_config_map(namespace, {"metadata": {"name": "owner"}})
    kube.core.create_namespaced_config_map(namespace, {"metadata": {"name": "dependent", "ownerReferences": [{
        "apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner.metadata.uid,
        "controller": True, "blockOwnerDeletion": True}]}})
    kube.core.delete_namespaced_config_map("owner", namespace)

    def gone() -> bool:
        try:
            kube.core.read_namespaced_config_map("dependent", namespace)
        except client.ApiException as exc:
            return exc.status == 404
        return False

    wait_for("the garbage collector to delete the dependent", gone)


def test_stale_resource_version_conflicts(kube: Kube, namespace: str) -> None:
    cm = kube.core.create_namespaced_config_map(namespace, {"metadata": {"name": "cm"}, "data": {"a": "1"}})
    stale = cm.metadata.resource_version
    kube.core.patch_namespaced_config_map("cm", namespace, {"data": {"a": "2"}})
    with pytest.raises(client.ApiException) as err:
        kube.core.replace_namespaced_config_map("cm", namespace, {
            "metadata": {"name": "cm", "resourceVersion": stale}, "data": {"a": "3"}})
    assert err.value.status == 409


def test_rbac_denies_unbound_service_account(kube: Kube, namespace: str) -> None:
    kube.core.create_namespaced_service_account(namespace, {"metadata": {"name": "nobody"}})
    token = kube.core.create_namespaced_service_account_token("nobody", namespace, {
        "spec": {"expirationSeconds": 600}}).status.token
    # Same server and CA as the admin kubeconfig, but authenticated only by the ServiceAccount's token.
    cfg = client.Configuration()
    config.load_kube_config(config_file=str(kube.kubeconfig), client_configuration=cfg)
    cfg.cert_file = cfg.key_file = None
    cfg.api_key = {"authorization": f"Bearer {token}"}
    as_nobody = client.CoreV1Api(client.ApiClient(cfg))
    with pytest.raises(client.ApiException) as err:
        as_nobody.list_namespaced_secret(namespace)
    assert err.value.status == 403
    assert f"system:serviceaccount:{namespace}:nobody" in err.value.body
    # the same identity is authenticated (not 401): it is authorization that refuses it
    review = client.AuthorizationV1Api(kube.api).create_subject_access_review({
        "spec": {"user": f"system:serviceaccount:{namespace}:nobody",
                 "resourceAttributes": {"namespace": namespace, "verb": "list", "resource": "secrets"}}})
    assert review.status.allowed is False


def test_pod_labelled_for_failure_fails(kube: Kube, namespace: str) -> None:
    kube.core.create_namespaced_pod(namespace, {
        "metadata": {"name": "doomed",
                     "labels": {"pod-container-running-failed.stage.kwok.x-k8s.io": "true"},
                     "annotations": {**FAST,
                                     "pod-container-running-failed.stage.kwok.x-k8s.io/delay": "0s",
                                     "pod-container-running-failed.stage.kwok.x-k8s.io/jitter-delay": "0s",
                                     "pod-container-running-failed.stage.kwok.x-k8s.io/message": "simulated crash"}},
        "spec": {"containers": [_container()], "restartPolicy": "Never"}})
    pod = wait_for("the pod to fail", lambda: (p := kube.core.read_namespaced_pod("doomed", namespace)).status.phase == "Failed" and p)
    term = pod.status.container_statuses[0].state.terminated
    assert term.exit_code != 0 and term.message == "simulated crash"


def test_events_are_recorded(kube: Kube, namespace: str) -> None:
    kube.core.create_namespaced_pod(namespace, {"metadata": {"name": "p", "annotations": FAST},
                                                "spec": {"containers": [_container()]}})
    events = wait_for("a Scheduled event for the pod", lambda: [
        e for e in kube.core.list_namespaced_event(namespace).items
        if e.involved_object.name == "p" and e.reason == "Scheduled"])
    assert events[0].source.component == "default-scheduler" or events[0].reporting_component == "default-scheduler"

