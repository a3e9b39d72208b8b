"""What deleting a SampleDB does with its data, proven with rows on real PostgreSQL (spec.deletionPolicy):
Snapshot's final backup restores every row acknowledged before the deletion, Retain keeps the data for a
SampleDB created again with the same name, Delete leaves no volume, Secret or backup behind."""

from __future__ import annotations

import re
import time

from tests.kube import Kube, wait_for
from tests.realnode import NODE_LANE, POSTGRES_IMAGE, ready_database
from tests.sampledb import BACKUPS, GROUP, PLURAL, VERSION, backup, backup_status, events, get, gone
from tests.writes import Writer, table_rows

pytestmark = NODE_LANE


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


def test_snapshot_of_a_reused_name_the_final_backup_holds_every_row_acknowledged_before_each_deletion(
        real: Kube, real_namespace: str, real_sampledb_operator) -> None:
    """A SampleDB deleted with Snapshot, then another of the same name (restored from the first one's final backup,
    given more rows) deleted again: each deletion takes a final backup of its own database (named after its UID,
    never the earlier one's taken for it), fenced first, so it holds every row acknowledged before the deletion (and
    the writer's last rows, refused once the fence is up, were never acknowledged)."""
    real_sampledb_operator()
    ns = real_namespace
    writer = _written(real, ns, "snap", 20, replicas=2, deletionPolicy="Snapshot")
    first_uid = get(real, ns, "snap")["metadata"]["uid"]
    asked = _delete(real, ns, "snap")  # the writer goes on until the servers stop
    first = writer.stop()
    first_final = f"snap-final-{first_uid[:8]}"
    assert backup_status(real, ns, first_final)["phase"] == "Completed"
    refused = [seq for seq, why in first.reasons.items() if "pg_hba.conf rejects connection" in why]
    assert refused, "the writer was never refused: the final backup was not fenced"

    # the same name again, on the first one's data, then more rows
    _database(real, ns, "snap", replicas=2, deletionPolicy="Snapshot", restoreFrom={"backup": first_final})
    second_uid = get(real, ns, "snap")["metadata"]["uid"]
    real.kubectl("-n", ns, "delete", "pod", "writer", "--wait=true")
    writer = Writer(real, ns, "snap", POSTGRES_IMAGE, start=max(first.acked) + 1000)
    writer.wait_for_more(20)
    asked_again = _delete(real, ns, "snap")
    second = writer.stop()
    second_final = f"snap-final-{second_uid[:8]}"
    assert second_final != first_final and backup_status(real, ns, second_final)["phase"] == "Completed"
    for final, writes, at in ((first_final, first, asked), (second_final, second, asked_again)):
        primary = _database(real, ns, f"copy-{final[-8:]}", replicas=1, deletionPolicy="Delete",
                            restoreFrom={"backup": final})
        restored = table_rows(real, ns, primary)
        # every row acknowledged, before the deletion was asked for and after until the fence: none after it
        missing = sorted(set(writes.acked) - restored)
        assert not missing, f"{len(missing)} acknowledged rows are not in the final backup {final}: {missing[:20]}"
        print(f"Snapshot: {len(writes.acked)} rows acknowledged ({len(writes.acked_before(at))} before the deletion "
              f"was asked for), all in the final backup {final}")
    # the second database's rows are its own final backup's, not the first one's
    assert set(second.acked) - set(first.acked)


def test_retain_a_sampledb_created_again_with_the_same_name_serves_the_same_rows(
        real: Kube, real_namespace: str, real_sampledb_operator) -> None:
    """Retain keeps the volumes; a SampleDB created again with the same name has no Lease (the first one's went with
    it): its servers are fenced and the one with the most WAL is promoted (the Recovered Event says each one's), not
    the lowest ordinal by default. keep-1 was the primary; keep-0, its synchronous replica, received all it wrote and
    its shutdown checkpoint, which a stopped replica counts to the record's end and a stopped primary from its start:
    either may show the most WAL, and either holds every acknowledged row."""
    real_sampledb_operator()
    ns = real_namespace
    writer = _written(real, ns, "keep", 10, replicas=2, deletionPolicy="Retain")
    real.custom.patch_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "keep", {"metadata": {"annotations": {
        "sampledb.example.com/switchover-to": "keep-1"}}})
    wait_for("keep-1 to be the primary", lambda: get(real, ns, "keep")["status"].get("currentPrimary") == "keep-1",
             timeout=300, interval=1)
    writer.wait_for_more(10)
    writes = writer.stop()
    _delete(real, ns, "keep")
    wait_for("the servers to stop", lambda: not _left(real, ns, "keep")["pods"], timeout=180)
    left = _left(real, ns, "keep")
    assert {"data-keep-0", "data-keep-1", "keep-backups"} <= set(left["pvcs"]) and "keep-credentials" in left["secrets"]

    primary = _database(real, ns, "keep", replicas=2, deletionPolicy="Delete")
    recovered = events(real, ns, "Recovered")[-1].message
    held = {name: (int(timeline), int(hi, 16) << 32 | int(lo, 16)) for name, hi, lo, timeline in
            re.findall(r"(keep-\d) ([0-9A-F]+)/([0-9A-F]+) \(timeline (\d+)\)", recovered)}
    assert held.keys() == {"keep-0", "keep-1"}, recovered
    assert held[primary] == max(held.values()), recovered
    missing = sorted(set(writes.acked) - table_rows(real, ns, primary))
    assert not missing, f"{len(missing)} acknowledged rows are not in the database created again: {missing[:20]}"
    assert get(real, ns, "keep")["status"]["readyReplicas"] == 2
    assert [e for e in real.core.list_namespaced_event(ns).items if e.reason == "Recovered"]


def test_delete_leaves_no_volume_secret_or_backup(real: Kube, real_namespace: str, real_sampledb_operator) -> None:
    real_sampledb_operator()
    ns = real_namespace
    _written(real, ns, "gone", 5, replicas=2, deletionPolicy="Delete").stop()
    backup(real, ns, "gone-taken", database="gone")
    wait_for("the backup to complete", lambda: backup_status(real, ns, "gone-taken").get("phase") == "Completed",
             timeout=300, interval=1)
    before = _left(real, ns, "gone")
    assert "gone-taken" in before["backups"] and "gone-backups" in before["pvcs"] and before["secrets"], before
    _delete(real, ns, "gone")
    empty = {"pvcs": [], "pvs": [], "secrets": [], "backups": [], "pods": []}
    wait_for("nothing of the database to be left", lambda: _left(real, ns, "gone") == empty or None, timeout=300)
