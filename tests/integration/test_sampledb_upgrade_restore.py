"""SampleDB restore (spec.restoreFrom) and upgrades (minor rolling, major migration, a failed step) on the
real cluster. kwok runs the pods and Jobs; what is checked is what the operator does with them and what
the user sees: order of the rollout, the Jobs' commands, status, conditions and Events."""

from __future__ import annotations

import re
import time

from tests.kube import Kube, wait_for
from tests.sampledb import (
    GROUP,
    PLURAL,
    VERSION,
    backup,
    backup_named,
    backup_status,
    condition,
    events,
    get,
    images,
    roles,
    sample,
    wait_phase,
)

IMAGE = "docker.io/library/postgres:{}"


def create(kube: Kube, namespace: str, name: str, **spec: object) -> None:
    # kwok runs no server: these versions only name images (15.8 -> 15.9 minor, -> 16.4 major)
    spec.setdefault("version", "15.8")
    kube.custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, sample(name, **spec))


def patch(kube: Kube, namespace: str, name: str, spec: dict) -> None:
    kube.custom.patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name, {"spec": spec})


def test_restore_builds_a_new_database_from_a_backup(kube: Kube, namespace: str, sampledb_operators) -> None:
    sampledb_operators()
    create(kube, namespace, "db", replicas=1)
    wait_phase(kube, namespace, "db")
    backup(kube, namespace, "nightly")
    wait_for("the backup", lambda: backup_status(kube, namespace, "nightly").get("phase") == "Completed", timeout=60)

    create(kube, namespace, "copy", replicas=1, restoreFrom={"backup": "nightly"})
    db = wait_phase(kube, namespace, "copy")
    job = kube.batch.read_namespaced_job("copy-restore", namespace)
    assert job.status.succeeded == 1
    pod = job.spec.template.spec
    env = {e.name: e.value for e in pod.containers[0].env if e.value}
    assert env["BACKUP_FILE"] == "/backups/db/nightly.sql.gz" and env["PGHOST"] == "copy-primary"
    assert "restore.sh" in pod.containers[0].command[-1]
    assert [v.persistent_volume_claim.claim_name for v in pod.volumes if v.persistent_volume_claim] == ["db-backups"]
    # restored instead of bootstrapped, and Ready only after the restore
    assert not kube.batch.list_namespaced_job(namespace, field_selector="metadata.name=copy-init").items
    assert db["status"]["initialized"] is True and condition(db, "Ready")["status"] == "True"
    assert wait_for("a Restored event", lambda: events(kube, namespace, "Restored"))

    # a backup that does not exist: the database says so, naming the field, and never becomes Ready
    create(kube, namespace, "nope", replicas=1, restoreFrom={"backup": "no-such-backup"})
    db = wait_phase(kube, namespace, "nope", "Failed", timeout=180)
    msg = condition(db, "Ready")["message"]
    assert msg.startswith("spec.restoreFrom.backup: SampleDBBackup no-such-backup does not exist"), msg
    assert wait_for("a RestoreFailed event", lambda: events(kube, namespace, "RestoreFailed"))  # after the status


def test_minor_upgrade_updates_replicas_first_and_the_primary_last(kube: Kube, namespace: str,
                                                                  sampledb_operators) -> None:
    """The replicas first, then a switchover to an upgraded replica, then the old primary, which comes back as a
    replica. (kwok's containers never stop: the fence deletes the old pod. Two servers: with more, the switchover
    needs the replicas' WAL positions, which kwok's pods cannot give.)"""
    sampledb_operators(failover_grace_seconds=0, fence_timeout_seconds=3)
    create(kube, namespace, "up", replicas=2)
    db = wait_phase(kube, namespace, "up")
    primary = db["status"]["currentPrimary"]
    assert primary == "up-0"

    started = time.monotonic()
    patch(kube, namespace, "up", {"version": "15.9"})
    updated: list[str] = []  # the order in which servers came up on 15.9
    backup_done_first = None

    def progress() -> bool:
        nonlocal backup_done_first
        now = images(kube, namespace, "up")
        for pod, image in sorted(now.items()):
            if image == IMAGE.format("15.9") and pod not in updated:
                updated.append(pod)
                if backup_done_first is None:
                    backup_done_first = backup_status(
                        kube, namespace, backup_named(kube, namespace, "up", "PreUpgrade")).get("phase") == "Completed"
        return get(kube, namespace, "up")["status"].get("version") == "15.9"

    wait_for("the upgrade to finish", progress, timeout=480, interval=0.2)
    elapsed = time.monotonic() - started
    print(f"\nminor upgrade of 3 servers (15.8 -> 15.9): {elapsed:.1f} s")
    assert backup_done_first is True  # the backup completed before any server was touched
    assert updated == ["up-1", "up-0"]  # replicas first, the primary last
    db = wait_phase(kube, namespace, "up")
    assert db["status"]["currentPrimary"] == "up-1" and "upgrade" not in db["status"]
    assert set(images(kube, namespace, "up").values()) == {IMAGE.format("15.9")}
    assert roles(kube, namespace, "up") == {"up-0": "replica", "up-1": "primary"}
    switched = events(kube, namespace, "SwitchedOver")
    assert switched and "for the upgrade" in switched[0].message, switched
    assert not events(kube, namespace, "FailedOver")  # a planned change of primary is not a failure
    assert events(kube, namespace, "UpgradeStarted")
    done = wait_for("an Upgraded event", lambda: events(kube, namespace, "Upgraded"))  # written after the status
    assert "upgraded from 15.8 to 15.9 in" in done[0].message
    # nothing but the operator replaces a server (the StatefulSet's OnDelete)
    assert kube.apps.read_namespaced_stateful_set("up", namespace).spec.update_strategy.type == "OnDelete"


def test_major_upgrade_migrates_by_dump_and_load(kube: Kube, namespace: str, sampledb_operators) -> None:
    sampledb_operators(failover_grace_seconds=0)
    create(kube, namespace, "major", replicas=2)
    wait_phase(kube, namespace, "major")
    # refused without allowMajor (the API says so), allowed with it
    proc = kube.kubectl("-n", namespace, "patch", "sdb", "major", "--type=merge", "-p", '{"spec":{"version":"16.4"}}',
                        check=False)
    assert proc.returncode != 0 and "spec.upgrade.allowMajor: true" in proc.stderr
    patch(kube, namespace, "major", {"version": "16.4", "upgrade": {"allowMajor": True}})
    wait_for("the upgrade to finish", lambda: get(kube, namespace, "major")["status"].get("version") == "16.4",
             timeout=480)
    assert backup_status(kube, namespace, backup_named(kube, namespace, "major", "PreUpgrade"))["phase"] == "Completed"
    dump = kube.batch.read_namespaced_job("major-migrate-16-4", namespace).spec.template.spec.containers[0]
    assert dump.image == IMAGE.format("16.4")  # the new version's pg_dumpall reads the old server
    assert dump.command[-2:] == ["dump", "/backups/major/migrate-15.8-to-16.4.sql.gz"]
    load = kube.batch.read_namespaced_job("major-load-16-4", namespace)
    assert load.status.succeeded == 1
    assert {e.name: e.value for e in load.spec.template.spec.containers[0].env if e.value}["BACKUP_FILE"] == \
        "/backups/major/migrate-15.8-to-16.4.sql.gz"
    wait_phase(kube, namespace, "major")
    wait_for("both servers on 16.4", lambda: images(kube, namespace, "major") == {
        "major-0": IMAGE.format("16.4"), "major-1": IMAGE.format("16.4")}, timeout=60)


def test_a_failed_step_stops_the_upgrade_on_the_old_version(kube: Kube, namespace: str, sampledb_operators) -> None:
    sampledb_operators(backup_pod_extra_labels={"pod-container-running-failed.stage.kwok.x-k8s.io": "true"},
                       backup_job_backoff_limit=0)
    create(kube, namespace, "stuck", replicas=2)
    wait_phase(kube, namespace, "stuck")
    patch(kube, namespace, "stuck", {"version": "15.9"})
    db = wait_for("the upgrade to stop", lambda: (d := get(kube, namespace, "stuck")) and
                  condition(d, "Degraded").get("reason") == "UpgradeFailed" and d, timeout=240)
    msg = condition(db, "Degraded")["message"]
    assert re.search(r"the pre-upgrade backup stuck-pre-15-9-[0-9a-f]{8} failed", msg) and "still serving 15.8" in msg, msg
    assert db["status"]["version"] == "15.8" and db["status"]["phase"] == "Ready"
    assert set(images(kube, namespace, "stuck").values()) == {IMAGE.format("15.8")}
    assert wait_for("an UpgradeFailed event", lambda: events(kube, namespace, "UpgradeFailed"), timeout=120)[0].type == "Warning"


def test_a_failed_load_rolls_the_major_upgrade_back_onto_the_old_data(kube: Kube, namespace: str,
                                                                      sampledb_operators) -> None:
    """The load into the new major fails (kwok fails the load Job's pod): the primary goes back to the old version on
    its own data (its pod told upgrade-rollback, the fence lifted), the servers come back, status says why and how to
    retry (Degraded, UpgradeFailed), and the upgrade is not tried again by itself."""
    sampledb_operators(failover_grace_seconds=0, migration_job_backoff_limit=0,
                       load_pod_extra_labels={"pod-container-running-failed.stage.kwok.x-k8s.io": "true"})
    create(kube, namespace, "back", replicas=2)
    wait_phase(kube, namespace, "back")
    patch(kube, namespace, "back", {"version": "16.4", "upgrade": {"allowMajor": True}})
    db = wait_for("the upgrade rolled back", lambda: (d := get(kube, namespace, "back")) and condition(
        d, "Degraded").get("reason") == "UpgradeFailed" and d, timeout=480, interval=1)
    msg = condition(db, "Degraded")["message"]
    assert "the upgrade was rolled back" in msg and "back-0 serves 15.8" in msg, msg
    assert "set spec.version back to 15.8, or delete Job back-load-16-4 to try again" in msg, msg
    wait_for("both servers back on 15.8", lambda: images(kube, namespace, "back") == {
        "back-0": IMAGE.format("15.8"), "back-1": IMAGE.format("15.8")}, timeout=300, interval=1)
    # (a pod made again for the old image is told in the leader's next step)
    wait_for("back-0 told to take its old data back", lambda: (kube.core.read_namespaced_pod(
        "back-0", namespace).metadata.annotations or {}).get("sampledb.example.com/upgrade-rollback") == "15",
        timeout=120, interval=1)
    wait_for("the fence lifted", lambda: "sampledb.example.com/fence" not in (
        kube.core.read_namespaced_pod(get(kube, namespace, "back")["status"]["currentPrimary"],
                                      namespace).metadata.annotations or {}), timeout=120)
    assert get(kube, namespace, "back")["status"]["version"] == "15.8"
    # the dump is taken anew on a retry (the old server took writes since): its Job is gone
    assert not [j for j in kube.batch.list_namespaced_job(namespace).items if j.metadata.name == "back-migrate-16-4"]
    assert events(kube, namespace, "UpgradeFailed")
    # set back: the database is as it was
    patch(kube, namespace, "back", {"version": "15.8"})
    wait_for("Degraded to clear", lambda: condition(get(kube, namespace, "back"), "Degraded").get("status") == "False",
             timeout=120, interval=1)
