"""SampleDB on the real node: deploy/samples as a user applies it becomes three real PostgreSQL servers,
one read-write primary and two streaming replicas, reached through the Services with the Secret's
credentials; backups, restores and the other Jobs run for real."""

from __future__ import annotations

from tests.kube import Kube, wait_for
from tests.realnode import (
    NODE_LANE,
    POSTGRES_IMAGE,
    ClientPod,
    Credentials,
    credentials,
    psql_in_server,
    simple_pod,
    wait_endpoints,
    wait_sql,
)
from tests.sampledb import GROUP, PLURAL, RARE_SCHEDULE, VERSION, backup, backup_status, get, roles, sample, wait_phase

pytestmark = NODE_LANE


def _create(real: Kube, namespace: str, doc: dict) -> None:
    real.custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, doc)


def _backup_files(real: Kube, namespace: str, database: str, pod: str) -> list[str]:
    """The files in ``database``'s directory of its backups volume, listed by a pod that mounts the volume."""
    body = simple_pod(pod, ["ls", "-1", f"/backups/{database}"], image=POSTGRES_IMAGE,
                      securityContext={"runAsNonRoot": True, "runAsUser": 999, "runAsGroup": 999},
                      volumes=[{"name": "backups", "persistentVolumeClaim": {"claimName": f"{database}-backups",
                                                                             "readOnly": True}}])
    body["spec"]["containers"][0]["volumeMounts"] = [{"name": "backups", "mountPath": "/backups", "readOnly": True}]
    real.core.create_namespaced_pod(namespace, body)
    phase = wait_for(f"{pod} to finish", lambda: (
        p := real.core.read_namespaced_pod(pod, namespace).status.phase) in ("Succeeded", "Failed") and p, timeout=120)
    out = real.kubectl("-n", namespace, "logs", pod).stdout
    assert phase == "Succeeded", out
    return sorted(out.split())


def test_the_sample_runs_three_real_servers_one_primary_two_streaming_replicas(
        real: Kube, real_namespace: str, real_sampledb_operator) -> None:
    real_sampledb_operator()
    ns = real_namespace
    doc = sample()  # deploy/samples/sampledb.yaml, unchanged but for the namespace it is created in
    _create(real, ns, doc)
    db = wait_phase(real, ns, "inventory", timeout=420)
    st = db["status"]
    assert st["readyReplicas"] == 3 and st["version"] == doc["spec"]["version"]
    primary = st["currentPrimary"]
    server_roles = roles(real, ns, "inventory")
    replicas = sorted(p for p, r in server_roles.items() if r == "replica")
    assert server_roles[primary] == "primary" and len(replicas) == 2

    # The servers are what the labels say: one read-write, two in recovery streaming from it.
    assert psql_in_server(real, ns, primary, "select pg_is_in_recovery()") == "f"
    for pod in replicas:
        assert psql_in_server(real, ns, pod, "select pg_is_in_recovery()") == "t"
    streaming = wait_sql(real, ns, primary, "select count(*) from pg_stat_replication where state = 'streaming'",
                         "2", timeout=120)
    assert streaming == "2"
    version = psql_in_server(real, ns, primary, "show server_version")
    assert version.startswith(doc["spec"]["version"])

    # An application pod reaches the primary by its Service with the Secret's credentials, and reads
    # through the replicas' Service from a replica.
    wait_endpoints(real, ns, "inventory-primary", [primary])
    wait_endpoints(real, ns, "inventory-replicas", replicas)
    creds = credentials(real, ns, "inventory")
    app = ClientPod(real, ns, POSTGRES_IMAGE)
    primary_host = f"inventory-primary.{ns}.svc.cluster.local"
    replicas_host = f"inventory-replicas.{ns}.svc"
    app.sql(primary_host, creds, "app",
            "create table orders (id int primary key, item text); "
            "insert into orders select g, 'item ' || g from generate_series(1, 1000) g")
    assert app.sql(primary_host, creds, "app", "select count(*), sum(id) from orders")[1] == "1000|500500"
    wait_for("the rows on the replicas", lambda: app.sql(
        replicas_host, creds, "app", "select count(*) from orders", check=False)[1] == "1000", timeout=60)
    assert app.sql(replicas_host, creds, "app", "select pg_is_in_recovery()")[1] == "t"
    rc, _, err = app.sql(replicas_host, creds, "app", "insert into orders values (1001, 'x')", check=False)
    assert rc != 0 and "read-only transaction" in err
    # a wrong password is refused: the servers really check credentials
    rc, _, err = app.sql(primary_host, Credentials(creds.user, "not-the-password"), "app", "select 1", check=False)
    assert rc != 0 and "password authentication failed" in err


def test_backup_restore_and_prune_jobs_run_for_real(real: Kube, real_namespace: str, real_sampledb_operator) -> None:
    """An on-demand backup restores into a new database with the same rows and its own credentials; retention
    prunes the oldest backup's record and file; a scheduled backup restores the same way."""
    real_sampledb_operator()
    ns = real_namespace
    _create(real, ns, sample("src", replicas=1, backup={"schedule": RARE_SCHEDULE, "retention": 1}))
    db = wait_phase(real, ns, "src", timeout=300)
    primary = db["status"]["currentPrimary"]
    app = ClientPod(real, ns, POSTGRES_IMAGE)
    src_host, src_creds = f"src-primary.{ns}.svc", credentials(real, ns, "src")
    wait_endpoints(real, ns, "src-primary", [primary])
    app.sql(src_host, src_creds, "app", "create table t (id int primary key); "
                                        "insert into t select generate_series(1, 500)")
    checksum_sql = "select count(*) || ':' || md5(string_agg(id::text, ',' order by id)) from t"
    before = app.sql(src_host, src_creds, "app", checksum_sql)[1]

    backup(real, ns, "first", database="src")
    st = wait_for("the backup to complete", lambda: (
        s := backup_status(real, ns, "first")).get("phase") in ("Completed", "Failed") and s, timeout=300)
    assert st["phase"] == "Completed", st
    # the backup's own Job (named after the SampleDBBackup's UID, and labelled with it) ran to success
    uid = real.custom.get_namespaced_custom_object(GROUP, VERSION, ns, "sampledbbackups", "first")["metadata"]["uid"]
    job = real.batch.read_namespaced_job(f"sdbb-{uid}", ns)
    assert job.metadata.labels["sampledb.example.com/backup-uid"] == uid
    job_pods = real.core.list_namespaced_pod(ns, label_selector=f"batch.kubernetes.io/job-name=sdbb-{uid}").items
    assert job.status.succeeded == 1 and any(p.status.phase == "Succeeded" for p in job_pods), job.status
    assert _backup_files(real, ns, "src", "ls-after-first") == ["first.sql.gz"]

    # A new database from that backup has the same rows, and its own working credentials.
    app.sql(src_host, src_creds, "app", "insert into t values (501)")  # after the backup: not in the copy
    restored = sample("copy", replicas=1, restoreFrom={"backup": "first"})
    _create(real, ns, restored)
    copy = wait_phase(real, ns, "copy", timeout=420)
    copy_primary = copy["status"]["currentPrimary"]
    assert psql_in_server(real, ns, copy_primary, checksum_sql, database="app") == before
    # the application user of the copy has the copy's own password, and still owns its tables
    wait_endpoints(real, ns, "copy-primary", [copy_primary])
    copy_creds = credentials(real, ns, "copy")
    assert copy_creds.password != src_creds.password
    assert app.sql(f"copy-primary.{ns}.svc", copy_creds, "app", checksum_sql)[1] == before

    # Retention 1: a second backup prunes the first, its record and its file (a prune Job on the volume).
    backup(real, ns, "second", database="src")
    wait_for("the second backup", lambda: backup_status(real, ns, "second").get("phase") == "Completed", timeout=300)
    wait_for("the first backup to be pruned", lambda: [
        b["metadata"]["name"] for b in real.custom.list_namespaced_custom_object(
            GROUP, VERSION, ns, "sampledbbackups")["items"]] == ["second"], timeout=180)
    wait_for("the prune Job to succeed", lambda: [
        j for j in real.batch.list_namespaced_job(ns).items
        if "prune" in j.metadata.name and (j.status.succeeded or 0) >= 1], timeout=180)
    # what is on the backups volume: the first backup's file gone, the second's there
    assert _backup_files(real, ns, "src", "ls-after-prune") == ["second.sql.gz"]
    assert get(real, ns, "src")["status"]["lastBackup"]["name"] == "second"

    # A scheduled backup (the CronJob, here every minute) is recorded as a SampleDBBackup with reason Scheduled
    # and restores the same way. (Retention 3 meanwhile: the one restored below is not pruned by the next.)
    app.sql(src_host, src_creds, "app", "insert into t values (502)")
    after = app.sql(src_host, src_creds, "app", checksum_sql)[1]
    real.custom.patch_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "src", {
        "spec": {"backup": {"schedule": "* * * * *", "retention": 3}}})

    def scheduled() -> str | None:
        return next((b["metadata"]["name"] for b in real.custom.list_namespaced_custom_object(
            GROUP, VERSION, ns, "sampledbbackups")["items"]
            if b["spec"].get("reason") == "Scheduled" and (b.get("status") or {}).get("phase") == "Completed"), None)

    name = wait_for("a scheduled backup to complete", scheduled, timeout=300, interval=2)
    real.custom.patch_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "src", {"spec": {"backup": {"suspend": True}}})
    _create(real, ns, sample("sched", replicas=1, restoreFrom={"backup": name}))
    sched = wait_phase(real, ns, "sched", timeout=420)
    assert psql_in_server(real, ns, sched["status"]["currentPrimary"], checksum_sql, database="app") == after
