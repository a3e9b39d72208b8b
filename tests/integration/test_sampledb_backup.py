"""SampleDB backups on the real cluster: on demand, scheduled (CronJob), retention, a failing backup."""

from __future__ import annotations

from tests.kube import Kube, wait_for
from tests.operator import FAST_PODS
from tests.sampledb import BACKUPS, GROUP, RARE_SCHEDULE, VERSION, backup, backup_status, get, sample

# kwok completes a Job's pod after this annotation's delay, and reads it again when it changes: the backup pods
# are held Running until the test lets them go, so that a run of the database sees a backup in progress
COMPLETE = "pod-complete.stage.kwok.x-k8s.io/"
HELD = {**FAST_PODS, COMPLETE + "delay": "1h", COMPLETE + "jitter-delay": "1h"}


def ready_db(kube: Kube, namespace: str, **spec: object) -> None:
    kube.custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "sampledbs", sample("db", replicas=1, **spec))
    wait_for("the SampleDB to be Ready", lambda: get(kube, namespace, "db").get("status", {}).get("phase") == "Ready",
             timeout=120)


def job_pod(kube: Kube, namespace: str, job: str):
    """The Running pod of ``job``, once kwok has started it."""
    return wait_for(f"{job}'s pod to run", lambda: next((
        p for p in kube.core.list_namespaced_pod(namespace, label_selector=f"batch.kubernetes.io/job-name={job}").items
        if p.status.phase == "Running"), None), timeout=60)


def release(kube: Kube, namespace: str, pod) -> None:
    kube.core.patch_namespaced_pod(pod.metadata.name, namespace, {"metadata": {"annotations": {
        COMPLETE + "delay": "0s", COMPLETE + "jitter-delay": "0s"}}})


def test_on_demand_backups_retention_and_schedule(kube: Kube, namespace: str, sampledb_operators) -> None:
    sampledb_operators(backup_pod_extra_annotations=HELD)
    ready_db(kube, namespace, backup={"schedule": RARE_SCHEDULE, "retention": 2})
    cron = wait_for("the backup CronJob", lambda: kube.batch.read_namespaced_cron_job("db-backup", namespace))
    assert cron.spec.schedule == RARE_SCHEDULE and cron.spec.suspend is False
    for i in range(3):
        backup(kube, namespace, f"b{i}")
        # on-demand backup Jobs are named after the backup's UID
        uid = wait_for(f"b{i}'s uid", lambda i=i: kube.custom.get_namespaced_custom_object(
            GROUP, VERSION, namespace, BACKUPS, f"b{i}")["metadata"]["uid"])
        pod = job_pod(kube, namespace, f"sdbb-{uid}")
        if i == 0:
            # what `kubectl get sdb` shows while a backup runs
            wait_for("kubectl get sdb to show BackingUp while b0 runs", lambda: " BackingUp " in kube.kubectl(
                "-n", namespace, "get", "sdb", "db").stdout, timeout=120)
            assert backup_status(kube, namespace, "b0").get("phase") in ("Pending", "Running")
        release(kube, namespace, pod)
        st = wait_for(f"backup b{i} to complete", lambda i=i: (
            s := backup_status(kube, namespace, f"b{i}")).get("phase") == "Completed" and s, timeout=60)
        assert st["location"] == f"pvc://db-backups/db/b{i}.sql.gz" and st["startedAt"] and st["completedAt"]
    # the backup's own status is written first, the database's right after, in the same run
    db = wait_for("the database to record b2", lambda: (d := get(kube, namespace, "db"))["status"].get(
        "lastBackup", {}).get("name") == "b2" and d)
    assert any(c["type"] == "LastBackupSucceeded" and c["status"] == "True" for c in db["status"]["conditions"])
    # retention 2: the oldest completed on-demand backup is pruned by the database's next run
    kube.custom.patch_namespaced_custom_object(GROUP, VERSION, namespace, "sampledbs", "db",
                                               {"spec": {"backup": {"suspend": True}}})
    wait_for("the oldest backup to be pruned", lambda: [
        b["metadata"]["name"] for b in kube.custom.list_namespaced_custom_object(
            GROUP, VERSION, namespace, BACKUPS)["items"]] == ["b1", "b2"], timeout=60)
    # and b0's file with it, by a Job on the backups volume
    jobs = wait_for("the prune Job", lambda: [j for j in kube.batch.list_namespaced_job(namespace).items
                                              if j.metadata.name.startswith("db-prune-")])
    assert jobs[0].spec.template.spec.containers[0].command == ["rm", "-f", "--", "/backups/db/b0.sql.gz"]
    release(kube, namespace, job_pod(kube, namespace, jobs[0].metadata.name))
    wait_for("the schedule to be suspended",
             lambda: kube.batch.read_namespaced_cron_job("db-backup", namespace).spec.suspend is True)
    # Ready again once no backup runs
    wait_for("kubectl get sdb to show Ready", lambda: " Ready " in kube.kubectl("-n", namespace, "get", "sdb", "db").stdout)


def test_scheduled_backups_are_recorded(kube: Kube, namespace: str, sampledb_operators) -> None:
    sampledb_operators()
    ready_db(kube, namespace, backup={"schedule": "* * * * *", "retention": 5})
    # the CronJob starts a Job at the next minute; the database's run records it as a SampleDBBackup
    found = wait_for("a scheduled backup on record", lambda: [
        b for b in kube.custom.list_namespaced_custom_object(GROUP, VERSION, namespace, BACKUPS)["items"]
        if b["spec"].get("reason") == "Scheduled"], timeout=150)
    name = found[0]["metadata"]["name"]
    assert name.startswith("db-backup-")
    wait_for("the scheduled backup to complete",
             lambda: backup_status(kube, namespace, name).get("phase") == "Completed", timeout=60)


def test_a_failing_backup_is_reported(kube: Kube, namespace: str, sampledb_operators) -> None:
    sampledb_operators(backup_pod_extra_labels={"pod-container-running-failed.stage.kwok.x-k8s.io": "true"},
                    backup_job_backoff_limit=0)
    ready_db(kube, namespace)
    backup(kube, namespace, "doomed")
    st = wait_for("the backup to fail", lambda: (
        s := backup_status(kube, namespace, "doomed")).get("phase") == "Failed" and s, timeout=90)
    assert "failed" in st["message"]
    cond = wait_for("the database's LastBackupSucceeded condition", lambda: next(
        (c for c in get(kube, namespace, "db")["status"].get("conditions", []) if c["type"] == "LastBackupSucceeded"),
        None))
    assert cond["status"] == "False" and cond["reason"] == "BackupFailed"
    events = wait_for("a BackupFailed event", lambda: [
        e for e in kube.core.list_namespaced_event(namespace).items if e.reason == "BackupFailed"])
    assert events and events[0].type == "Warning"


def test_a_backup_of_a_missing_database_is_refused(kube: Kube, namespace: str, sampledb_operators) -> None:
    sampledb_operators()
    backup(kube, namespace, "orphan", database="nosuchdb")
    st = wait_for("the backup to fail", lambda: (
        s := backup_status(kube, namespace, "orphan")).get("phase") == "Failed" and s, timeout=60)
    assert st["message"] == f"SampleDB nosuchdb does not exist in namespace {namespace}"


