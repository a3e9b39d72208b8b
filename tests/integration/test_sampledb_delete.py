"""What deleting a SampleDB does with its data, per spec.deletionPolicy (the snapshot_on_delete finalizer),
on the real cluster."""

from __future__ import annotations

import pytest

from tests.kube import Kube, wait_for
from tests.sampledb import (
    BACKUPS,
    GROUP,
    PLURAL,
    VERSION,
    backup,
    backup_status,
    condition,
    events,
    get,
    gone,
    sample,
    wait_phase,
)

FINALIZER = "sampledb.example.com/snapshot-on-delete"


def pvcs(kube: Kube, namespace: str) -> dict[str, list[str]]:
    """Each PVC that is not being deleted, and the kinds of its owners."""
    return {p.metadata.name: [o.kind for o in p.metadata.owner_references or []]
            for p in kube.core.list_namespaced_persistent_volume_claim(namespace).items
            if not p.metadata.deletion_timestamp}


def backups(kube: Kube, namespace: str) -> dict[str, list[str]]:
    return {b["metadata"]["name"]: [o["kind"] for o in b["metadata"].get("ownerReferences", [])]
            for b in kube.custom.list_namespaced_custom_object(GROUP, VERSION, namespace, BACKUPS)["items"]}


@pytest.mark.parametrize("policy", ["Snapshot", "Retain", "Delete"])
def test_deletion_policy(kube: Kube, namespace: str, sampledb_operators, policy: str) -> None:
    sampledb_operators()
    kube.custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL,
                                                sample("db", replicas=2, deletionPolicy=policy))
    db = wait_phase(kube, namespace, "db")
    final = f"db-final-{db['metadata']['uid'][:8]}"  # after the database's UID: a reused name is another database
    assert FINALIZER in db["metadata"]["finalizers"]
    backup(kube, namespace, "earlier")
    wait_for("a backup", lambda: backup_status(kube, namespace, "earlier").get("phase") == "Completed", timeout=60)
    data = {"data-db-0", "data-db-1"}
    assert data | {"db-backups"} <= set(pvcs(kube, namespace))

    kube.custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "db")
    wait_for("the SampleDB to go", lambda: gone(kube, namespace, "db"), timeout=120)
    wait_for("the servers to go", lambda: not kube.apps.list_namespaced_stateful_set(namespace).items, timeout=60)
    if policy == "Snapshot":
        # the final backup completed first; it and the earlier one outlive the database, as does their volume
        assert backup_status(kube, namespace, final)["phase"] == "Completed"
        wait_for("the data volumes to go", lambda: pvcs(kube, namespace) == {"db-backups": []}, timeout=60)
        assert backups(kube, namespace) == {"earlier": [], final: []}
        # the name used again, by a database deleted with Delete: its own data goes, the first one's backups stay
        kube.custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL,
                                                    sample("db", replicas=1, deletionPolicy="Delete"))
        wait_phase(kube, namespace, "db")
        backup(kube, namespace, "second")
        wait_for("its backup", lambda: backup_status(kube, namespace, "second").get("phase") == "Completed",
                 timeout=60)
        kube.custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "db")
        wait_for("the second SampleDB to go", lambda: gone(kube, namespace, "db"), timeout=120)
        wait_for("its backup to go", lambda: "second" not in backups(kube, namespace), timeout=60)
        assert backups(kube, namespace) == {"earlier": [], final: []}
        wait_for("its data volume to go", lambda: pvcs(kube, namespace) == {"db-backups": []}, timeout=60)
        kept = events(kube, namespace, "BackupsVolumeKept")
        assert kept and "earlier" in kept[0].message and final in kept[0].message, kept
    elif policy == "Retain":
        wait_for("the credentials to stay, unowned", lambda: not kube.core.read_namespaced_secret(
            "db-credentials", namespace).metadata.owner_references)
        # (the StatefulSet's garbage collection takes its time; the volumes must never go)
        assert set(pvcs(kube, namespace)) == data | {"db-backups"}
        assert all(not owners for owners in pvcs(kube, namespace).values())
        assert backups(kube, namespace) == {"earlier": []}
        wait_for("the rest to go", lambda: kube.core.list_namespaced_config_map(
            namespace, label_selector="app.kubernetes.io/instance=db").items == [], timeout=60)
    else:
        wait_for("every volume to go", lambda: pvcs(kube, namespace) == {}, timeout=60)
        wait_for("every backup to go", lambda: backups(kube, namespace) == {}, timeout=60)


def test_a_failing_final_backup_blocks_deletion(kube: Kube, namespace: str, sampledb_operators) -> None:
    sampledb_operators(backup_pod_extra_labels={"pod-container-running-failed.stage.kwok.x-k8s.io": "true"},
                       backup_job_backoff_limit=0)
    kube.custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, sample("db", replicas=1))
    wait_phase(kube, namespace, "db")
    kube.custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "db")
    db = wait_for("the deletion to be blocked", lambda: (d := get(kube, namespace, "db")) and
                  condition(d, "DeletionBlocked").get("reason") == "FinalBackupFailed" and d, timeout=90)
    msg = condition(db, "DeletionBlocked")["message"]
    final = f"db-final-{db['metadata']['uid'][:8]}"
    assert msg.startswith(f"the final backup {final} failed, so nothing of db was deleted"), msg
    assert "spec.deletionPolicy" in msg and db["status"]["phase"] == "Deleting"
    ev = wait_for("a FinalBackupFailed event", lambda: events(kube, namespace, "FinalBackupFailed"))
    assert ev[0].type == "Warning"
    # nothing was deleted
    assert {"data-db-0", "db-backups"} <= set(pvcs(kube, namespace))
    assert kube.apps.read_namespaced_stateful_set("db", namespace)
    # the way out the message offers: give up the data
    kube.custom.patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "db",
                                               {"spec": {"deletionPolicy": "Delete"}})
    wait_for("the SampleDB to go", lambda: gone(kube, namespace, "db"), timeout=120)
