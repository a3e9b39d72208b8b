"""SampleDB as a user sees it through the API: the sample, the objects' status, the servers' roles and
images, backups. Shared by the kwok tier (tests/integration), the real-node tier (tests/e2e) and bench."""

from __future__ import annotations

import yaml
from kubernetes import client

from tests.kube import Kube, wait_for
from tests.operator import ROOT

GROUP, VERSION, PLURAL = "sampledb.example.com", "v1alpha1", "sampledbs"
BACKUPS = "sampledbbackups"
# A backup schedule that never fires while a test runs (03:00 on 29 February): a daily one fired in a CI run
# that crossed 03:00 and added a scheduled backup to a test that counted the on-demand ones.
RARE_SCHEDULE = "0 3 29 2 *"


def sample(name: str = "inventory", **spec: object) -> dict:
    doc = yaml.safe_load((ROOT / "deploy" / "samples" / "sampledb.yaml").read_text())
    doc["metadata"]["name"] = name
    doc["spec"].update(spec)
    return doc

def get(kube: Kube, namespace: str, name: str) -> dict:
    return kube.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)

def gone(kube: Kube, namespace: str, name: str) -> bool:
    try:
        get(kube, namespace, name)
    except client.ApiException as exc:
        return exc.status == 404
    return False

def roles(kube: Kube, namespace: str, name: str) -> dict[str, str]:
    """Each server pod (not the Jobs') and its sampledb.example.com/role label."""
    pods = kube.core.list_namespaced_pod(
        namespace, label_selector=f"app.kubernetes.io/instance={name},statefulset.kubernetes.io/pod-name").items
    return {p.metadata.name: (p.metadata.labels or {}).get("sampledb.example.com/role", "") for p in pods}

def wait_phase(kube: Kube, namespace: str, name: str, phase: str = "Ready", timeout: float = 300) -> dict:
    return wait_for(f"SampleDB {name} to be {phase}", lambda: (
        d := get(kube, namespace, name)).get("status", {}).get("phase") == phase and d, timeout=timeout)

def condition(db: dict, kind: str) -> dict:
    return next((c for c in db.get("status", {}).get("conditions", []) if c["type"] == kind), {})

def events(kube: Kube, namespace: str, reason: str) -> list:
    """The namespace's Events of that reason, oldest first (by when each was last seen): the API lists them by name."""
    def seen(e) -> float:
        when = e.last_timestamp or e.event_time or e.metadata.creation_timestamp
        return when.timestamp() if when else 0.0

    return sorted((e for e in kube.core.list_namespaced_event(namespace).items if e.reason == reason), key=seen)

def images(kube: Kube, namespace: str, name: str) -> dict[str, str]:
    """Each server pod and the PostgreSQL image it runs."""
    pods = kube.core.list_namespaced_pod(
        namespace, label_selector=f"app.kubernetes.io/instance={name},statefulset.kubernetes.io/pod-name").items
    return {p.metadata.name: p.spec.containers[0].image for p in pods if not p.metadata.deletion_timestamp}

def backup(kube: Kube, namespace: str, name: str, database: str = "db") -> None:
    kube.custom.create_namespaced_custom_object(GROUP, VERSION, namespace, BACKUPS, {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "SampleDBBackup", "metadata": {"name": name},
        "spec": {"database": database}})

def backup_status(kube: Kube, namespace: str, name: str) -> dict:
    return kube.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, BACKUPS, name).get("status") or {}


def backup_named(kube: Kube, namespace: str, database: str, reason: str) -> str:
    """The name of the newest SampleDBBackup of ``database`` taken for ``reason`` (Final, PreUpgrade: named after the
    SampleDB's UID), '' when there is none."""
    items = kube.custom.list_namespaced_custom_object(GROUP, VERSION, namespace, BACKUPS)["items"]
    mine = [b for b in items if b["spec"].get("database") == database and b["spec"].get("reason") == reason]
    mine.sort(key=lambda b: b["metadata"]["creationTimestamp"])
    return mine[-1]["metadata"]["name"] if mine else ""


def let_namespace_go(kube: Kube, namespace: str, timeout: float = 180) -> None:
    """Deletes the test's namespace while its operator still runs, so that its SampleDBs' finalizers let them go
    (and their servers stop) instead of leaving the namespace Terminating on this shared cluster."""
    kube.core.delete_namespace(namespace, propagation_policy="Background")
    wait_for("the test's SampleDBs to be let go with their namespace", lambda: not kube.custom.
             list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)["items"], timeout=timeout)
