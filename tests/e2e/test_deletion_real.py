"""What deleting a SampleDB does with its data, proven with rows on real PostgreSQL (spec.deletionPolicy):
Snapshot's final backup restores every row acknowledged before the deletion, Retain keeps the data for a
SampleDB created again with the same name, Delete leaves no volume, Secret or backup behind."""

from __future__ import annotations

import time

import pytest

from tests.kube import Kube, wait_for
from tests.realnode import POSTGRES_IMAGE, ready_database
from tests.sampledb import BACKUPS, GROUP, PLURAL, VERSION, backup_status, get, gone
from tests.writes import Writer, table_rows

pytestmark = pytest.mark.xdist_group("e2e")


def _database(real: Kube, ns: str, name: str, **spec: object) -> str:
    return ready_database(real, ns, name, **spec)["status"]["currentPrimary"]


def _written(real: Kube, ns: str, name: str, rows: int, **spec: object) -> Writer:
    """A Ready database and a writer that has written ``rows`` more rows (it goes on until stopped)."""
    _database(real, ns, name, **spec)
    writer = Writer(real, ns, name, POSTGRES_IMAGE)
    writer.wait_for_more(rows)
    return writer


def _delete(real: Kube, ns: str, name: str) -> float:
    asked = time.time()
    real.custom.delete_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, name)
    wait_for(f"SampleDB {name} to go", lambda: gone(real, ns, name), timeout=420)
    return asked


def _left(real: Kube, ns: str, name: str) -> dict[str, list[str]]:
    selector = f"app.kubernetes.io/instance={name}"
    return {
        "pvcs": [p.metadata.name for p in real.core.list_namespaced_persistent_volume_claim(ns).items
                 if not p.metadata.deletion_timestamp],
        "pvs": [v.metadata.name for v in real.core.list_persistent_volume().items
                if v.spec.claim_ref and v.spec.claim_ref.namespace == ns],
        "secrets": [s.metadata.name for s in real.core.list_namespaced_secret(ns).items
                    if s.metadata.name.startswith(f"{name}-")],
        "backups": [b["metadata"]["name"] for b in real.custom.list_namespaced_custom_object(
            GROUP, VERSION, ns, BACKUPS)["items"]],
        "pods": [p.metadata.name for p in real.core.list_namespaced_pod(ns, label_selector=selector).items],
    }


def test_snapshot_the_final_backup_restores_every_row_acknowledged_before_the_deletion(
        real: Kube, real_namespace: str, real_sampledb_operator) -> None:
    real_sampledb_operator()
    ns = real_namespace
    writer = _written(real, ns, "snap", 20, replicas=2, deletionPolicy="Snapshot")
    asked = _delete(real, ns, "snap")  # the writer goes on until the servers stop
    writes = writer.stop()
    before = writes.acked_before(asked)
    assert backup_status(real, ns, "snap-final")["phase"] == "Completed"

    primary = _database(real, ns, "snapcopy", replicas=1, deletionPolicy="Delete", restoreFrom={"backup": "snap-final"})
    missing = sorted(before - table_rows(real, ns, primary))
    assert not missing, f"{len(missing)} rows acknowledged before the deletion are not in its final backup: {missing[:20]}"
    print(f"Snapshot: {len(before)} rows acknowledged before the deletion, all in the final backup's restore")


def test_retain_a_sampledb_created_again_with_the_same_name_serves_the_same_rows(
        real: Kube, real_namespace: str, real_sampledb_operator) -> None:
    real_sampledb_operator()
    ns = real_namespace
    writes = _written(real, ns, "keep", 20, replicas=2, deletionPolicy="Retain").stop()
    _delete(real, ns, "keep")
    wait_for("the servers to stop", lambda: not _left(real, ns, "keep")["pods"], timeout=180)
    left = _left(real, ns, "keep")
    assert {"data-keep-0", "data-keep-1", "keep-backups"} <= set(left["pvcs"]) and "keep-credentials" in left["secrets"]

    primary = _database(real, ns, "keep", replicas=2, deletionPolicy="Delete")
    missing = sorted(set(writes.acked) - table_rows(real, ns, primary))
    assert not missing, f"{len(missing)} acknowledged rows are not in the database created again: {missing[:20]}"
    assert get(real, ns, "keep")["status"]["readyReplicas"] == 2


def test_delete_leaves_no_volume_secret_or_backup(real: Kube, real_namespace: str, real_sampledb_operator) -> None:
    real_sampledb_operator()
    ns = real_namespace
    _written(real, ns, "gone", 5, replicas=2, deletionPolicy="Delete").stop()
    _delete(real, ns, "gone")
    empty = {"pvcs": [], "pvs": [], "secrets": [], "backups": [], "pods": []}
    wait_for("nothing of the database to be left", lambda: _left(real, ns, "gone") == empty or None, timeout=300)
