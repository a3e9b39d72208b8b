"""The common SampleDB filters (roles/common/filter_plugins/sampledb.py) that feed metrics."""

from __future__ import annotations

from tests.plugins import plugin

filters = plugin("roles/common/filter_plugins/sampledb.py")


def backup(phase: str, completed: str | None = None) -> dict:
    status = {"phase": phase}
    if completed:
        status["completedAt"] = completed
    return {"metadata": {"name": "b"}, "status": status}


def test_the_newest_completed_backup_and_the_last_scheduled_start() -> None:
    records = [backup("Completed", "2026-11-24T10:00:00Z"), backup("Completed", "2026-11-24T11:00:00Z"),
               backup("Failed"), backup("Running"), {"metadata": {"name": "new"}}]
    times = filters.sampledb_backup_times(records, "2026-11-24T12:00:00Z")
    assert times["last_success"] == int(filters.datetime(2026, 11, 24, 11, tzinfo=filters.UTC).timestamp())
    assert times["last_scheduled"] - times["last_success"] == 3600  # the 12:00 backup has not completed


def test_never_is_zero() -> None:
    assert filters.sampledb_backup_times([], None) == {"last_success": 0, "last_scheduled": 0}
    assert filters.sampledb_backup_times([backup("Failed")], "") == {"last_success": 0, "last_scheduled": 0}


def test_the_object_of_a_kind_as_applied() -> None:
    one = {"changed": False, "result": {"kind": "CronJob", "status": {"lastScheduleTime": "2026-11-24T12:00:00Z"}}}
    several = {"changed": False, "result": {"results": [
        {"changed": False, "method": "apply", "result": {"kind": "PersistentVolumeClaim"}},
        {"changed": True, "method": "apply", "result": {"kind": "CronJob", "spec": {"suspend": True}}}]}}
    assert filters.sampledb_applied(one, "CronJob") == one["result"]
    assert filters.sampledb_applied(several, "CronJob") == {"kind": "CronJob", "spec": {"suspend": True}}
    assert filters.sampledb_applied(several, "StatefulSet") == {}
    assert filters.sampledb_applied({"skipped": True}, "CronJob") == {}


# ---------------------------------------------------------------------------------------------- what is this database's

def meta(name: str, kind: str = "Pod", owner: dict | None = None, labels: dict | None = None, **extra) -> dict:
    m = {"name": name, "labels": labels or {}, **extra}
    if owner:
        m["ownerReferences"] = [{"controller": True, **owner}]
    return {"kind": kind, "metadata": m}


def test_only_the_databases_own_servers_are_its_servers() -> None:
    """A Helm release named like the database shares its instance label: its pods are never fenced or promoted."""
    sts = {"kind": "StatefulSet", "name": "db", "uid": "u"}
    pods = [meta("db-0", owner=sts), meta("db-1"),                                    # re-created StatefulSet
            meta("db-2", owner={"kind": "StatefulSet", "name": "db-helm"}),             # another workload's
            meta("db-web-7d9", owner={"kind": "ReplicaSet", "name": "db-web"}),         # a Deployment's
            meta("db-0-debug"), meta("dbx-0", owner=sts)]
    assert [p["metadata"]["name"] for p in filters.sampledb_own_servers(pods, "db")] == ["db-0", "db-1"]
    # a SampleDB created again at once: the earlier one's pods, still going, are not its servers
    pods[0]["metadata"]["creationTimestamp"] = "2026-11-25T09:00:00Z"
    pods[1]["metadata"]["creationTimestamp"] = "2026-11-25T10:00:05Z"
    assert [p["metadata"]["name"] for p in filters.sampledb_own_servers(pods, "db", "2026-11-25T10:00:00Z")] == ["db-1"]
    claims = [meta("data-db-0", "PersistentVolumeClaim"), meta("data-db-10", "PersistentVolumeClaim"),
              meta("data-db-0-old", "PersistentVolumeClaim"), meta("backups-db", "PersistentVolumeClaim")]
    assert [c["metadata"]["name"] for c in filters.sampledb_own_volumes(claims, "db")] == ["data-db-0", "data-db-10"]


def test_an_object_of_another_application_is_named_not_taken_over() -> None:
    selector = {"app.kubernetes.io/instance": "db"}
    objects = [meta("db-config", "ConfigMap", owner={"uid": "mine"}),              # this SampleDB's
               meta("db-credentials", "Secret", labels=dict(selector)),            # an earlier SampleDB's, kept
               meta("db", "Service", labels={"app.kubernetes.io/instance": "web"}),  # a user's Service named db
               meta("db-backups", "PersistentVolumeClaim")]                        # unlabelled, unowned
    assert filters.sampledb_foreign(objects, "mine", selector) == ["Service db", "PersistentVolumeClaim db-backups"]


def test_a_restart_is_due_only_for_what_the_server_reads_at_start() -> None:
    restart = ["shared_buffers", "max_connections"]
    base = {"postgresql.conf": "max_connections = '100'\nshared_buffers = '128MB'\nwork_mem = '4MB'\n",
            "pg_hba.conf": "host all all all scram-sha-256\n", "entrypoint.sh": "v1"}
    h = filters.sampledb_restart_hash(base, restart)
    reloaded = {**base, "postgresql.conf": base["postgresql.conf"].replace("4MB", "8MB"), "pg_hba.conf": "x"}
    assert filters.sampledb_restart_hash(reloaded, restart) == h
    # archive.sh reads the object store's settings at each WAL file: another bucket or endpoint is no restart
    assert filters.sampledb_restart_hash({**base, "objectstore.env": "SAMPLEDB_S3_URL=s3://b\n"}, restart) == h
    for changed in ({**base, "postgresql.conf": base["postgresql.conf"].replace("128MB", "256MB")},
                    {**base, "entrypoint.sh": "v2"}):
        assert filters.sampledb_restart_hash(changed, restart) != h


def claim(name: str, size: str, cls: str | None = None) -> dict:
    spec = {"resources": {"requests": {"storage": size}}}
    if cls:
        spec["storageClassName"] = cls
    return {"metadata": {"name": name}, "spec": spec}


def test_volumes_grow_in_place_where_their_class_allows_and_a_refusal_names_the_field_and_the_fix() -> None:
    classes = [{"metadata": {"name": "fast", "annotations": {filters.DEFAULT_CLASS: "true"}},
                "allowVolumeExpansion": True},
               {"metadata": {"name": "fixed"}}]
    claims = [claim("data-db-0", "1Gi"), claim("data-db-1", "2Gi")]
    assert filters.sampledb_volume_growth(claims, "2Gi", classes) == {"grow": ["data-db-0"], "size": "2Gi",
                                                                      "refused": ""}
    sts = {"spec": {"volumeClaimTemplates": [claim("data", "1Gi")]}}
    out = filters.sampledb_volume_growth([claim("data-db-0", "1Gi", "fixed")], "5Gi", classes, sts=sts)
    assert out["grow"] == [] and out["size"] == "1Gi"
    assert out["refused"].startswith("spec.storage.size 5Gi: the volumes of StorageClass fixed cannot grow")
    assert "set spec.storage.size back to 1Gi" in out["refused"]
    # shrinking is not growing: nothing to do, and the template keeps the larger claims' size out of it
    assert filters.sampledb_volume_growth(claims, "1Gi", classes)["grow"] == []


def test_a_database_of_a_reused_name_never_counts_the_backups_of_the_one_before() -> None:
    label = "sampledb.example.com/database-uid"

    def record(name: str, created: str, uid: str | None = None, database: str = "db") -> dict:
        labels = {label: uid} if uid else {}
        return {"metadata": {"name": name, "labels": labels, "creationTimestamp": created},
                "spec": {"database": database}}

    records = [record("old-final", "2026-11-20T10:00:00Z", uid="old"),
               record("old-unlabelled", "2026-11-20T11:00:00Z"),
               record("mine", "2026-11-25T10:00:00Z", uid="new"),
               record("mine-unlabelled", "2026-11-25T11:00:00Z"),
               record("other-db", "2026-11-25T11:00:00Z", uid="new", database="other")]
    own = filters.sampledb_backups_of(records, "db", "new", "2026-11-25T09:00:00Z", label)
    assert [r["metadata"]["name"] for r in own] == ["mine", "mine-unlabelled"]


def test_volumes_hold_data_if_marked_or_kept_but_not_while_they_are_deleted() -> None:
    created = "2026-11-25T10:00:00Z"
    kept = {"metadata": {"name": "data-db-0", "creationTimestamp": "2026-11-20T10:00:00Z"}}
    marked = {"metadata": {"name": "data-db-0", "creationTimestamp": "2026-11-25T11:00:00Z",
                           "annotations": {filters.IDENTITY_ANNOTATION: "7000"}}}
    new = {"metadata": {"name": "data-db-0", "creationTimestamp": "2026-11-25T11:00:00Z"}}
    assert filters.sampledb_volumes_hold_data([kept], created) and filters.sampledb_volumes_hold_data([marked], created)
    assert not filters.sampledb_volumes_hold_data([new], created)
    # a database created again while the one before's volumes are still going (deletionPolicy Snapshot, Delete)
    going = {"metadata": {**kept["metadata"], "deletionTimestamp": "2026-11-25T09:59:00Z"}}
    assert not filters.sampledb_volumes_hold_data([going, new], created)


def test_a_commit_waits_for_the_databases_servers_by_name_only() -> None:
    """Not '*': a clone's pg_basebackup streams WAL too, and would acknowledge commits for a copy that may be lost."""
    assert filters.sampledb_synchronous_standby_names("db", 3) == 'ANY 1 ("db-0","db-1","db-2")'
    assert filters.sampledb_synchronous_standby_names("db", "2") == 'ANY 1 ("db-0","db-1")'
    assert filters.sampledb_synchronous_standby_names("db", 1) == ""


def test_a_job_of_an_earlier_database_of_the_name_is_not_this_ones_outcome() -> None:
    """A SampleDB deleted and created again at once (with restoreFrom): the old db-restore Job, Succeeded and not yet
    garbage-collected, must not make the new database 'restored' with nothing loaded."""
    done = {"metadata": {"name": "db-restore", "ownerReferences": [{"uid": "old"}]}, "status": {"succeeded": 1}}
    assert filters.sampledb_job_state(done) == "Succeeded"
    assert filters.sampledb_job_state(done, "old") == "Succeeded"
    assert filters.sampledb_job_state(done, "new") == "Running"
    assert filters.sampledb_job_state({}, "new") == "None"


def test_jobs_still_running_are_those_neither_succeeded_nor_out_of_retries() -> None:
    jobs = [{"metadata": {"name": "a"}, "status": {"succeeded": 1}},
            {"metadata": {"name": "b"}, "status": {"failed": 3, "conditions": [{"type": "Failed", "status": "True"}]}},
            {"metadata": {"name": "c"}, "status": {"failed": 1}},
            {"metadata": {"name": "d"}}]
    assert filters.sampledb_jobs_running(jobs) == ["c", "d"]
    assert filters.sampledb_jobs_running(None) == []
