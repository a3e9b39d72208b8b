"""Continuous archiving to the local cluster's object store (versitygw beside the nodes, barman-cloud in the servers):
deploy/samples/sampledb-objectstore.yaml as a user applies it archives its WAL, segment by segment, to the store, where
barman-cloud gets the very bytes back; a second database aimed at the same path is refused, naming the field, and
writes nothing there; each setting a user gets wrong is named while the server runs, which archives once it is right;
an outage and a failover during it leave no hole. On the cluster of three real nodes, with the operator as deployed."""

from __future__ import annotations

import itertools
import json
import re
import time
from functools import partial

import yaml

from localcluster.cluster import LocalCluster
from localcluster.netnode import StoreAction
from localcluster.node import OBJECTSTORE_SECRET_KEY
from tests.kube import Kube, wait_for
from tests.operator import ROOT
from tests.realnode import NODES_LANE, POSTGRES_IMAGE, freeze_postmaster, psql_in_server, simple_pod
from tests.sampledb import GROUP, PLURAL, VERSION, backup, backup_named, backup_status, events, get, wait_phase
from tests.writes import Writer

pytestmark = NODES_LANE

SAMPLE = ROOT / "deploy" / "samples" / "sampledb-objectstore.yaml"
ENDPOINT = "http://versitygw.objectstore.svc:7070"
STORE = {"endpointURL": ENDPOINT, "bucket": "sampledb", "credentials": {"secretName": "objectstore-keys"}}


def keys_secret(kube: Kube, ns: str) -> None:
    """Only the sample's Secret (the local store's keys)."""
    secret = next(d for d in yaml.safe_load_all(SAMPLE.read_text()) if d["kind"] == "Secret")
    kube.kubectl("-n", ns, "apply", "-f", "-", input=json.dumps(secret))


def one_server(kube: Kube, ns: str, name: str, **spec: object) -> None:
    """A SampleDB of one small server, ``spec`` over it."""
    kube.custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "SampleDB", "metadata": {"name": name},
        "spec": {"version": "15.18", "replicas": 1, "storage": {"size": "1Gi"}, "deletionPolicy": "Delete", **spec}})


def condition(kube: Kube, ns: str, name: str, kind: str) -> dict:
    return next((c for c in (get(kube, ns, name).get("status") or {}).get("conditions") or []
                 if c.get("type") == kind), {})


def poke(kube: Kube, ns: str, name: str) -> None:
    """A run now (an annotation change brings a SampleDB back at once), rather than at the reconcile period."""
    kube.kubectl("-n", ns, "annotate", "sdb", name, f"test.example.com/poke={time.monotonic_ns()}", "--overwrite")


def wait_condition(kube: Kube, ns: str, name: str, kind: str, status: str, timeout: float = 180) -> dict:
    def check() -> dict | None:
        found = condition(kube, ns, name, kind)
        if found.get("status") == status:
            return found
        poke(kube, ns, name)
        return None

    return wait_for(f"{name}'s {kind} to be {status}", check, timeout=timeout, interval=5)


def archived_files(cluster: LocalCluster, ns: str, name: str) -> dict[str, tuple[int, int]]:
    """The archive's WAL objects (PostgreSQL 15's), as the store keeps them on this machine: name → (size, mtime in
    ns)."""
    wals = cluster.node.layout.objectstore / "sampledb" / ns / name / "pg15" / "wals"
    return {p.name: (p.stat().st_size, p.stat().st_mtime_ns) for p in wals.rglob("*") if p.is_file()}


def switch_and_archive(kube: Kube, ns: str, pod: str) -> str:
    """Writes, switches to a new segment and waits until the primary archived the one it left; returns its name."""
    segment = psql_in_server(kube, ns, pod, "create table if not exists t (id serial, at timestamptz default now()); "
                                            "insert into t select from generate_series(1, 1000); "
                                            "select pg_walfile_name(pg_switch_wal())")
    wait_for(f"{segment} archived by {pod}", lambda: psql_in_server(
        kube, ns, pod, "select last_archived_wal >= '" + segment + "' from pg_stat_archiver") == "t",
             timeout=120, interval=1)
    return segment


def run_pod(kube: Kube, ns: str, name: str, script: str, secret: str) -> str:
    """A pod of the PostgreSQL image (barman-cloud in it) runs ``script`` with the Secret's keys in its environment."""
    body = simple_pod(name, ["/bin/bash", "-c", script], image=POSTGRES_IMAGE,
                      securityContext={"runAsNonRoot": True, "runAsUser": 999, "runAsGroup": 999})
    body["spec"]["containers"][0]["env"] = [
        {"name": "AWS_ACCESS_KEY_ID", "valueFrom": {"secretKeyRef": {"name": secret, "key": "ACCESS_KEY_ID"}}},
        {"name": "AWS_SECRET_ACCESS_KEY", "valueFrom": {"secretKeyRef": {"name": secret, "key": "ACCESS_SECRET_KEY"}}},
        {"name": "AWS_DEFAULT_REGION", "value": "us-east-1"}]
    kube.core.create_namespaced_pod(ns, body)
    phase = wait_for(f"{name} to finish", lambda: (
        p := kube.core.read_namespaced_pod(name, ns).status.phase) in ("Succeeded", "Failed") and p, timeout=180)
    out = kube.kubectl("-n", ns, "logs", name).stdout
    assert phase == "Succeeded", out
    return out


def test_the_sample_archives_each_wal_segment_to_the_object_store_and_barman_gets_it_back(
        nodes: Kube, nodes_namespace: str, nodes_cluster: LocalCluster, nodes_sampledb_operator) -> None:
    nodes_sampledb_operator()
    ns = nodes_namespace
    nodes.kubectl("-n", ns, "apply", "-f", str(SAMPLE))  # as it is
    db = wait_phase(nodes, ns, "ledger", timeout=420)
    primary = db["status"]["currentPrimary"]

    segment = switch_and_archive(nodes, ns, primary)
    files = archived_files(nodes_cluster, ns, "ledger")
    assert f"{segment}.gz" in files, sorted(files)  # gzip: the sample's default compression

    # The store gives back the very bytes the primary wrote (barman-cloud-wal-restore, in a pod, with the keys).
    on_primary = nodes.kubectl("-n", ns, "exec", primary, "-c", "postgres", "--", "bash", "-c",
                               f'md5sum "$PGDATA/pg_wal/{segment}"').stdout.split()[0]
    restored = run_pod(nodes, ns, "restore-segment", (
        f"barman-cloud-wal-restore --endpoint-url {ENDPOINT} --addressing-style path s3://sampledb/{ns}/ledger pg15 "
        f"{segment} /tmp/segment && md5sum /tmp/segment"), "objectstore-keys").split()[0]
    assert restored == on_primary

    # Status says so, with the segment, and no more than what waits.
    def reported() -> dict | None:
        archive = (get(nodes, ns, "ledger").get("status") or {}).get("archive") or {}
        if (archive.get("lastArchivedWal") or "") >= segment:
            return archive
        poke(nodes, ns, "ledger")
        return None

    found = wait_for("status.archive to name the archived segment", reported, timeout=180, interval=5)
    assert found["destination"] == f"s3://sampledb/{ns}/ledger/pg15"
    archiving = wait_condition(nodes, ns, "ledger", "ContinuousArchiving", "True")
    assert archiving["reason"] == "ArchivingWorks", archiving

    # The replicas never upload (the archive holds the primary's WAL only), yet they mark what the primary archived.
    replicas = [p for p in (f"ledger-{i}" for i in range(3)) if p != primary]
    for pod in replicas:
        wait_for(f"{pod} to mark {segment} archived", lambda pod=pod: psql_in_server(
            nodes, ns, pod, f"select coalesce(last_archived_wal >= '{segment}', false) from pg_stat_archiver") == "t",
                 timeout=120, interval=2)

    # The keys are nowhere a user or a log would show them.
    shown = nodes.kubectl("-n", ns, "get", "sdb,statefulset,configmap,pod,event", "-o", "yaml").stdout
    logs = "".join(nodes.kubectl("-n", ns, "logs", p, "-c", "postgres", check=False).stdout
                   for p in (f"ledger-{i}" for i in range(3)))
    assert OBJECTSTORE_SECRET_KEY not in shown and OBJECTSTORE_SECRET_KEY not in logs


def test_a_second_database_on_an_archive_in_use_is_refused_naming_the_path_and_writes_nothing_there(
        nodes: Kube, nodes_namespace: str, nodes_cluster: LocalCluster, nodes_sampledb_operator) -> None:
    nodes_sampledb_operator()
    ns = nodes_namespace
    keys_secret(nodes, ns)

    def create(name: str, **extra: object) -> None:
        one_server(nodes, ns, name, backup={"schedule": "0 0 1 1 *", "objectStore": {**STORE, **extra}})

    create("first")
    first = wait_phase(nodes, ns, "first", timeout=300)["status"]["currentPrimary"]
    switch_and_archive(nodes, ns, first)
    before = archived_files(nodes_cluster, ns, "first")

    create("second", path=f"{ns}/first")
    second = wait_phase(nodes, ns, "second", timeout=300)["status"]["currentPrimary"]
    psql_in_server(nodes, ns, second, "create table t (id int); insert into t values (1); select pg_switch_wal()")
    refused = wait_condition(nodes, ns, "second", "ContinuousArchiving", "False")
    assert refused["reason"] == "ArchiveNotEmpty", refused
    assert refused["message"].startswith(f"spec.backup.objectStore.path: s3://sampledb/{ns}/first/pg15 already holds "
                                         "WAL of another database")
    # The first database's archive is as it was: nothing of the second's overwrote or joined it.
    after = archived_files(nodes_cluster, ns, "first")
    assert {k: v for k, v in after.items() if k in before} == before
    assert psql_in_server(nodes, ns, second, "select archived_count from pg_stat_archiver") == "0"


def test_each_bad_object_store_setting_is_named_in_status_and_loses_nothing(
        nodes: Kube, nodes_namespace: str, nodes_cluster: LocalCluster, nodes_sampledb_operator) -> None:
    """spec.backup.objectStore and spec.restoreFrom.objectStore wrong in each way a user gets them wrong: a Secret
    missing, a key missing, keys the store refuses, a bucket that is not there (never created for them), an endpoint
    that does not resolve, an archive with no base backup. Each is a condition naming the field to fix; the server runs
    throughout and loses no row, and once fixed it archives again, with no restart. Deleted with its keys, its final
    backup is a dump."""
    nodes_sampledb_operator()
    ns = nodes_namespace
    keys_secret(nodes, ns)
    store, create = STORE, partial(one_server, nodes, ns)

    # Restores that cannot be, side by side with the rest (their servers wait, each saying why in Degraded).
    create("from-nothing", restoreFrom={"objectStore": {**store, "sourceName": "never-archived"}})
    create("from-no-bucket", restoreFrom={"objectStore": {**store, "bucket": "no-such-bucket", "sourceName": "x"}})
    create("nokeys", backup={"objectStore": {**store, "credentials": {"secretName": "not-there"}}})
    wait_phase(nodes, ns, "nokeys", timeout=300)  # (the Secret's volume is optional: the server runs)
    primary = get(nodes, ns, "nokeys")["status"]["currentPrimary"]
    psql_in_server(nodes, ns, primary, "create table k (id int); insert into k select generate_series(1, 100)")

    def named(reason: str, start: str, timeout: float = 240) -> str:
        def check() -> str | None:
            # (a segment completed for the archiver to try again at once, not at its next minute)
            psql_in_server(nodes, ns, primary, "insert into k values (0); select pg_switch_wal()")
            found = condition(nodes, ns, "nokeys", "ContinuousArchiving")
            if (found.get("status"), found.get("reason")) == ("False", reason) and found["message"].startswith(start):
                return found["message"]
            poke(nodes, ns, "nokeys")
            return None

        said = wait_for(f"ContinuousArchiving {reason}: {start}", check, timeout=timeout, interval=5)
        print(f"{reason}: {said}")
        return said

    named("CredentialsMissing", "spec.backup.objectStore.credentials: no such Secret (Secret not-there")
    # A Secret with only one of the keys names the other (the kubelet refreshes a Secret's files within a minute
    # or so, a ConfigMap's too: nothing restarts).
    def secret(**keys: str) -> None:
        nodes.kubectl("-n", ns, "apply", "-f", "-", input=json.dumps({
            "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "not-there"}, "stringData": keys}))

    secret(ACCESS_KEY_ID="sampledb-local")
    wait_for("ContinuousArchiving to name the missing key", lambda: "no key ACCESS_SECRET_KEY" in (
        condition(nodes, ns, "nokeys", "ContinuousArchiving").get("message") or poke(nodes, ns, "nokeys") or ""),
             timeout=120, interval=5)
    secret(ACCESS_KEY_ID="sampledb-local", ACCESS_SECRET_KEY="not-the-key")
    named("CredentialsRefused", "spec.backup.objectStore.credentials: the object store at "
                                f"{ENDPOINT} refused the keys (SignatureDoesNotMatch")
    secret(ACCESS_KEY_ID="sampledb-local", ACCESS_SECRET_KEY=OBJECTSTORE_SECRET_KEY)
    assert wait_condition(nodes, ns, "nokeys", "ContinuousArchiving", "True", timeout=300)["reason"] == "ArchivingWorks"

    def edit(**changes: object) -> None:
        nodes.custom.patch_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "nokeys", {
            "spec": {"backup": {"objectStore": changes}}})

    edit(bucket="no-such-bucket")
    named("BucketMissing", f"spec.backup.objectStore.bucket: there is no bucket no-such-bucket at {ENDPOINT}: create it")
    edit(bucket="sampledb", endpointURL="http://no-store.objectstore.svc:7070")
    named("StoreUnreachable", "spec.backup.objectStore.endpointURL: the object store at "
                              "http://no-store.objectstore.svc:7070 does not answer")
    edit(endpointURL=ENDPOINT)
    wait_condition(nodes, ns, "nokeys", "ContinuousArchiving", "True", timeout=300)
    last = switch_and_archive(nodes, ns, primary)
    assert f"{last}.gz" in archived_files(nodes_cluster, ns, "nokeys")

    def degraded(name: str, start: str) -> str:
        said = wait_for(f"{name}'s status to say why it does not start", lambda: (
            m := condition(nodes, ns, name, "Degraded").get("message", "")) and "recovery from" in m and m,
                        timeout=120, interval=5)
        assert start in said, said
        assert condition(nodes, ns, name, "Ready").get("status") != "True"
        print(f"{name}: {said}")
        return said

    degraded("from-nothing", f"spec.restoreFrom.objectStore: s3://sampledb/{ns}/never-archived/pg15 holds no "
                             "completed base backup: check its bucket, path and sourceName")
    degraded("from-no-bucket", "spec.restoreFrom.objectStore.bucket: there is no bucket no-such-bucket")

    # Nothing was lost or made: the server never restarted, every row is there, no bucket was created.
    assert psql_in_server(nodes, ns, primary, "select count(*) filter (where id > 0) from k") == "100"
    server = nodes.core.read_namespaced_pod(primary, ns).status.container_statuses
    assert next(c for c in server if c.name == "postgres").restart_count == 0
    assert not (nodes_cluster.node.layout.objectstore / "no-such-bucket").exists()

    # Deleted together with its keys (as `kubectl delete -f` of a file holding both does), deletionPolicy Snapshot: the
    # final backup is a dump, which needs no keys, and the deletion completes.
    nodes.kubectl("-n", ns, "patch", "sdb", "nokeys", "--type=merge", "-p", '{"spec":{"deletionPolicy":"Snapshot"}}')
    nodes.kubectl("-n", ns, "delete", "secret", "not-there")
    nodes.kubectl("-n", ns, "delete", "sdb", "nokeys", "--wait=false")
    wait_for("nokeys to be deleted after its final backup", lambda: nodes.kubectl(
        "-n", ns, "get", "sdb", "nokeys", check=False).returncode != 0, timeout=300, interval=3)
    final = backup_status(nodes, ns, backup_named(nodes, ns, "nokeys", "Final"))
    assert (final.get("phase"), final.get("method")) == ("Completed", "dump"), final


def segments(files: dict[str, tuple[int, int]]) -> dict[int, list[int]]:
    """The archived WAL segments by timeline: their numbers (log * 256 + segment, 16 MB segments), sorted (a segment's
    .partial, which a promoted standby archives, and a backup's label in it count as that segment)."""
    out: dict[int, set[int]] = {}
    for f in files:
        name = f.split(".")[0]
        if len(name) == 24:
            out.setdefault(int(name[:8], 16), set()).add(int(name[8:16], 16) * 256 + int(name[16:], 16))
    return {tli: sorted(nums) for tli, nums in out.items()}


def test_a_failover_during_an_outage_leaves_no_hole_and_a_switchover_archives_its_timeline(
        nodes: Kube, nodes_namespace: str, nodes_cluster: LocalCluster, nodes_sampledb_operator) -> None:
    """The store down for a minute while segments complete on the primary, which then hangs and is failed over: the
    promoted replica archives what the old primary never could (archive_mode=always), so once the store is back the
    archive has every segment; then a switchover's new primary archives its own timeline."""
    nodes_sampledb_operator()
    ns = nodes_namespace
    nodes.kubectl("-n", ns, "apply", "-f", str(SAMPLE))
    nodes.kubectl("-n", ns, "patch", "sdb", "ledger", "--type=merge", "-p", '{"spec": {"deletionPolicy": "Delete"}}')
    first = wait_phase(nodes, ns, "ledger", timeout=420)["status"]["currentPrimary"]
    switch_and_archive(nodes, ns, first)

    print(nodes_cluster.objectstore(StoreAction.STOP))
    try:
        down_at = time.monotonic()
        during = [psql_in_server(nodes, ns, first, "insert into t select from generate_series(1, 1000); "
                                                   "select pg_walfile_name(pg_switch_wal())") for _ in range(2)]
        failing = wait_condition(nodes, ns, "ledger", "ContinuousArchiving", "False")
        assert failing["reason"] == "StoreUnreachable", failing
        assert failing["message"].startswith(f"spec.backup.objectStore.endpointURL: the object store at {ENDPOINT} "
                                             "does not answer"), failing
        print(f"while the store is down: {failing['message']}")
        archive = get(nodes, ns, "ledger")["status"]["archive"]
        assert archive["waitingSegments"] >= 2 and archive["lastError"], archive
        assert not set(during) & {f.split(".")[0] for f in archived_files(nodes_cluster, ns, "ledger")}
        # The primary hangs (its server frozen): a replica is promoted; the segments above wait on it now.
        freeze_postmaster(nodes, ns, first)
        second = wait_for("a failover", lambda: (p := get(nodes, ns, "ledger")["status"].get("currentPrimary"))
                          != first and get(nodes, ns, "ledger")["status"].get("phase") == "Ready" and p,
                          timeout=240, interval=2)
        time.sleep(max(0.0, 60 - (time.monotonic() - down_at)))
    finally:
        print(nodes_cluster.objectstore(StoreAction.START))
    on_second = switch_and_archive(nodes, ns, second)
    assert wait_condition(nodes, ns, "ledger", "ContinuousArchiving", "True")["reason"] == "ArchivingWorks"
    held = {f.split(".")[0] for f in archived_files(nodes_cluster, ns, "ledger")}
    assert set(during) <= held, (during, sorted(held))  # archived by the promoted replica

    # A switchover: the new primary archives its new timeline too.
    third = next(p for p in (f"ledger-{i}" for i in range(3)) if p not in (first, second))
    nodes.custom.patch_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "ledger", {
        "metadata": {"annotations": {"sampledb.example.com/switchover-to": third}}})
    wait_for(f"{third} to be the primary", lambda: get(nodes, ns, "ledger")["status"].get("currentPrimary") == third
             and get(nodes, ns, "ledger")["status"].get("phase") == "Ready", timeout=240, interval=2)
    on_third = switch_and_archive(nodes, ns, third)
    assert wait_condition(nodes, ns, "ledger", "ContinuousArchiving", "True")["reason"] == "ArchivingWorks"

    files = archived_files(nodes_cluster, ns, "ledger")
    tlis = segments(files)
    second_tli, third_tli = int(on_second[:8], 16), int(on_third[:8], 16)
    assert 1 < second_tli < third_tli, (on_second, on_third)
    stems = {f.removesuffix(".gz").removesuffix(".bz2") for f in files}
    assert {f"{second_tli:08X}.history", f"{third_tli:08X}.history"} <= stems, sorted(files)
    # No hole: each timeline's segments run on without a gap, and the next one begins where it left off.
    for tli, nums in tlis.items():
        assert nums == list(range(nums[0], nums[-1] + 1)), (tli, nums)
    for older, newer in itertools.pairwise(sorted(tlis)):
        assert tlis[newer][0] <= tlis[older][-1] + 1, (older, tlis[older][-1], newer, tlis[newer][0])
    print(f"archived: {', '.join(f'timeline {t}: {len(n)} segments' for t, n in sorted(tlis.items()))}")


def test_a_physical_backup_copies_a_replica_to_the_store_and_says_what_it_holds(
        nodes: Kube, nodes_namespace: str, nodes_cluster: LocalCluster, nodes_sampledb_operator) -> None:
    """A SampleDBBackup of the sample (it has an object store) is physical by default: barman-cloud copies a Ready
    replica's data directory (the primary is spared the reads) while the database takes writes; the backup completes
    with barman's id, where it begins and ends in the WAL, its size and the server copied, in status; its files are
    in the store beside the archive, and barman-cloud lists it there. Named "first" (a word barman reserves), then
    deleted and made again under that name, both complete and both stay in the store."""
    nodes_sampledb_operator()
    ns = nodes_namespace
    nodes.kubectl("-n", ns, "apply", "-f", str(SAMPLE))
    db = wait_phase(nodes, ns, "ledger", timeout=420)
    primary = db["status"]["currentPrimary"]
    switch_and_archive(nodes, ns, primary)
    wait_condition(nodes, ns, "ledger", "ContinuousArchiving", "True")
    # Restore drills every minute: the first ones find no base backup to restore, and say so (the sample's nightly
    # base backup moved out of the way: a run across 00:30 UTC would take one)
    nodes.kubectl("-n", ns, "patch", "sdb", "ledger", "--type=merge", "-p", json.dumps(
        {"spec": {"backup": {"schedule": "0 0 1 1 *", "verify": {"schedule": "* * * * *"}}}}))
    failed = wait_condition(nodes, ns, "ledger", "RecoveryVerified", "False", timeout=300)
    assert failed["reason"] == "DrillFailed" and "no completed base backup" in failed["message"], failed
    # (the status role writes the condition, then the Event)
    wait_for("an Event to say that the drill failed", lambda: events(nodes, ns, "RecoveryVerificationFailed"),
             timeout=60, interval=2)

    def take() -> dict:
        backup(nodes, ns, "first", database="ledger")
        done = wait_for("the backup to finish", lambda: (
            st := backup_status(nodes, ns, "first")).get("phase") in ("Completed", "Failed") and st,
                        timeout=420, interval=3)
        assert done["phase"] == "Completed", done
        return done

    done = take()
    assert done["method"] == "physical"
    assert done["server"] in {"ledger-0", "ledger-1", "ledger-2"} - {primary}, done
    assert re.fullmatch(r"[0-9]{8}T[0-9]{6}", done["backupId"]), done
    assert done["backupName"].startswith("first."), done
    assert re.fullmatch(r"[0-9A-F]+/[0-9A-F]+", done["beginLSN"]) and re.fullmatch(r"[0-9A-F]+/[0-9A-F]+", done["endLSN"])
    assert done["location"] == f"s3://sampledb/{ns}/ledger/pg15/base/{done['backupId']}"
    assert done["size"] != "unknown"
    stored = nodes_cluster.node.layout.objectstore / "sampledb" / ns / "ledger" / "pg15" / "base" / done["backupId"]
    assert (stored / "backup.info").is_file() and any(stored.glob("data.tar*")), sorted(stored.iterdir())

    nodes.custom.delete_namespaced_custom_object(GROUP, VERSION, ns, "sampledbbackups", "first")
    wait_for("the first record to go", lambda: not any(
        b["metadata"]["name"] == "first" for b in nodes.custom.list_namespaced_custom_object(
            GROUP, VERSION, ns, "sampledbbackups")["items"]), timeout=60)
    again = take()
    assert again["backupId"] != done["backupId"] and again["backupName"] != done["backupName"], (done, again)
    # (the sample's retentionPolicy, 7d, keeps both: a recovery can reach back to the end of the first)
    recoverable = get(nodes, ns, "ledger")["status"].get("firstRecoverabilityPoint", "")
    assert recoverable[:19] == done["endTime"][:19], (recoverable, done)
    # and how far forward: the newest segment archived, after the newest base backup's end
    poke(nodes, ns, "ledger")
    until = wait_for("status.lastRecoverabilityPoint", lambda: (
        st := get(nodes, ns, "ledger")["status"]).get("lastRecoverabilityPoint", "") >= again["endTime"][:19] and st,
        timeout=180, interval=3)
    assert until["lastRecoverabilityPoint"] <= until["archive"]["lastArchivedAt"], until
    # and a drill restores the newest base backup with the WAL archived after it (rows written since) in a scratch
    # volume: recorded in status
    written = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 1))
    switch_and_archive(nodes, ns, get(nodes, ns, "ledger")["status"]["currentPrimary"])

    def verified() -> dict | None:
        poke(nodes, ns, "ledger")
        last = (get(nodes, ns, "ledger")["status"].get("lastVerifiedRecovery") or {})
        return last if last.get("backupId") == again["backupId"] and last.get("recoveredTo", "") >= written else None
    last = wait_for("a restore drill of the newest base backup and the WAL after it to pass", verified, timeout=300,
                    interval=5)
    assert re.fullmatch(r"20[0-9-]{8}T[0-9:]{8}Z", last["recoveredTo"]) and int(last["databases"]) >= 3, last
    assert condition(nodes, ns, "ledger", "RecoveryVerified")["status"] == "True"
    listed = run_pod(nodes, ns, "list-backups", (
        f"barman-cloud-backup-list --endpoint-url {ENDPOINT} --addressing-style path --format json "
        f"s3://sampledb/{ns}/ledger pg15"), "objectstore-keys")
    assert done["backupId"] in listed and again["backupId"] in listed, listed


def test_a_database_recovered_from_anothers_archive_to_a_time_holds_exactly_the_rows_committed_before_it(
        nodes: Kube, nodes_namespace: str, nodes_cluster: LocalCluster, nodes_sampledb_operator) -> None:
    """Point-in-time recovery into three servers, the writer running throughout: a base backup, the object store down
    for a minute (archiving False, the backlog archived once it is back), a time T, another base backup; a new SampleDB restored from the first one's archive to T holds, on every server, every row
    acknowledged before T and none sent after it, runs on a new timeline with its replicas streaming, archives to its
    own path (the source's archive gets none of its WAL), and takes writes."""
    nodes_sampledb_operator()
    ns = nodes_namespace
    nodes.kubectl("-n", ns, "apply", "-f", str(SAMPLE))
    wait_phase(nodes, ns, "ledger", timeout=420)
    wait_condition(nodes, ns, "ledger", "ContinuousArchiving", "True")
    writer = Writer(nodes, ns, "ledger", POSTGRES_IMAGE)

    def base_backup(name: str, database: str = "ledger") -> None:
        backup(nodes, ns, name, database=database)
        done = wait_for(f"base backup {name}", lambda: (
            st := backup_status(nodes, ns, name)).get("phase") in ("Completed", "Failed") and st,
                        timeout=420, interval=3)
        assert done["phase"] == "Completed", done

    base_backup("before")
    writer.wait_for_more(50)
    # The object store down for a minute while the writer writes: archiving fails and says so, the WAL waits on the
    # primary, and is archived once the store is back; the recovery to T below replays through that minute.
    print(nodes_cluster.objectstore(StoreAction.STOP))
    try:
        down = time.time()
        failing = wait_condition(nodes, ns, "ledger", "ContinuousArchiving", "False", timeout=240)
        print(f"the store down: {failing['reason']}: {failing['message']}")
        time.sleep(max(0.0, 60 - (time.time() - down)))
    finally:
        print(nodes_cluster.objectstore(StoreAction.START))
    up = time.time()
    wait_for("the backlog archived", lambda: (
        (get(nodes, ns, "ledger")["status"].get("archive") or {}).get("waitingSegments") == 0
        and condition(nodes, ns, "ledger", "ContinuousArchiving").get("status") == "True") or poke(nodes, ns, "ledger"),
             timeout=300, interval=5)
    writer.wait_for_more(20)
    target = time.time()
    writer.wait_for_more(50)
    base_backup("after")
    writer.wait_for_more(20)
    writes = writer.stop()
    switch_and_archive(nodes, ns, get(nodes, ns, "ledger")["status"]["currentPrimary"])
    # every attempt's time: a row is sent after the previous one's attempt ended
    attempts = sorted({**writes.acked, **writes.failed}.items())
    must = writes.acked_before(target)
    during = {seq for seq, at in writes.acked.items() if down <= at <= up}
    assert len(during) >= 10 and during <= set(must), "the writer wrote while the store was down"
    must_not = {seq for (_, before), (seq, _) in itertools.pairwise(attempts) if before > target}
    assert must and must_not, "the writer wrote on both sides of the target"

    source = next(d for d in yaml.safe_load_all(SAMPLE.read_text()) if d["kind"] == "SampleDB")
    store = source["spec"]["backup"]["objectStore"]
    when = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(target)) + f".{int(target % 1 * 1e6):06d}Z"
    copy = {**source, "metadata": {"name": "ledger-pitr"},
            "spec": {**source["spec"], "restoreFrom": {
                "objectStore": {"endpointURL": store["endpointURL"], "bucket": store["bucket"], "sourceName": "ledger",
                                "credentials": store["credentials"]},
                "targetTime": when}}}
    nodes.kubectl("-n", ns, "apply", "-f", "-", input=json.dumps(copy))
    wait_phase(nodes, ns, "ledger-pitr", timeout=600)

    def rolled_out() -> bool:
        """Once recovered, the source's keys are unmounted: the servers are replaced once (a rollout), then Ready."""
        sts = nodes.apps.read_namespaced_stateful_set("ledger-pitr", ns)
        keys = any(v.name == "recovery-keys" for v in sts.spec.template.spec.volumes or [])
        pods = nodes.core.list_namespaced_pod(
            ns, label_selector="app.kubernetes.io/instance=ledger-pitr,statefulset.kubernetes.io/pod-name").items
        revisions = {p.metadata.labels.get("controller-revision-hash") for p in pods}
        return (not keys and revisions == {sts.status.update_revision}
                and get(nodes, ns, "ledger-pitr")["status"].get("phase") == "Ready")

    wait_for("the recovered servers to be replaced without the source's keys, and Ready", rolled_out, timeout=600,
             interval=3)
    new_primary = get(nodes, ns, "ledger-pitr")["status"]["currentPrimary"]
    for pod in ("ledger-pitr-0", "ledger-pitr-1", "ledger-pitr-2"):
        # (a server replaced last in the rollout may still be starting)
        rows = wait_for(f"{pod} to answer with the rows", lambda pod=pod: psql_in_server(
            nodes, ns, pod, "select string_agg(seq::text, ' ') from acked_writes", database="app", check=False),
                        timeout=180, interval=3)
        rows = {int(x) for x in rows.split()}
        assert not must - rows, f"{pod} lacks rows acknowledged before {when}: {sorted(must - rows)[:20]}"
        assert not must_not & rows, f"{pod} holds rows sent after {when}: {sorted(must_not & rows)[:20]}"
    timeline = int(psql_in_server(nodes, ns, new_primary, "select timeline_id from pg_control_checkpoint()"))
    assert timeline >= 2, timeline
    wait_for("both replicas to stream from the recovered primary", lambda: psql_in_server(
        nodes, ns, new_primary, "select count(*) from pg_stat_replication where state = 'streaming'") == "2",
             timeout=120)
    psql_in_server(nodes, ns, new_primary, "insert into acked_writes (seq) values (1000000)", database="app")
    history = f"{timeline:08X}.history"
    wait_for(f"{history} in the new database's archive", lambda: any(
        name.startswith(history) for name in archived_files(nodes_cluster, ns, "ledger-pitr")), timeout=180, interval=3)
    assert not any(name.startswith(f"{timeline:08X}") for name in archived_files(nodes_cluster, ns, "ledger")), \
        "the recovered database's WAL went to the source's archive"

    # Asked for what cannot be: refused by the CRD (two targets), or said in status (no base backup that early).
    both = {**copy, "metadata": {"name": "ledger-both"},
            "spec": {**copy["spec"], "restoreFrom": {**copy["spec"]["restoreFrom"], "targetLSN": "0/3000060"}}}
    refused = nodes.kubectl("-n", ns, "apply", "--dry-run=server", "-f", "-", input=json.dumps(both), check=False)
    assert refused.returncode != 0 and "at most one of targetTime, targetLSN" in refused.stderr, refused.stderr
    early = {**copy, "metadata": {"name": "ledger-early"},
             "spec": {**copy["spec"], "replicas": 1, "restoreFrom": {
                 **copy["spec"]["restoreFrom"], "targetTime": "2001-01-01T00:00:00Z"}}}
    nodes.kubectl("-n", ns, "apply", "-f", "-", input=json.dumps(early))
    said = wait_for("ledger-early's status to say why it does not start", lambda: (
        m := condition(nodes, ns, "ledger-early", "Degraded").get("message", "")) and "recovery from" in m and m,
        timeout=240, interval=5)
    assert "s3://sampledb/" in said and "no completed base backup ends before the target" in said, said
    assert "the first recoverability point is 20" in said, said
    assert condition(nodes, ns, "ledger-early", "Ready").get("status") != "True"

    # Deleted (deletionPolicy Snapshot) while a writer writes: the final backup goes to the object store, physical,
    # from the fenced primary; a database recovered from that archive with no target holds every row ever
    # acknowledged, the final backup's base backup its newest.
    tried = max({**writes.acked, **writes.failed})
    last_writer = Writer(nodes, ns, "ledger", POSTGRES_IMAGE, name="writer-last", start=tried + 1000)
    last_writer.wait_for_more(30)
    final = f"ledger-final-{get(nodes, ns, 'ledger')['metadata']['uid'][:8]}"
    nodes.kubectl("-n", ns, "delete", "sdb", "ledger", "--wait=false")
    wait_for("ledger to be deleted after its final backup", lambda: nodes.kubectl(
        "-n", ns, "get", "sdb", "ledger", check=False).returncode != 0, timeout=600, interval=3)
    last_writes = last_writer.stop()
    kept = backup_status(nodes, ns, final)
    assert (kept.get("phase"), kept.get("method")) == ("Completed", "physical"), kept
    assert kept["location"].endswith(f"/{ns}/ledger/pg15/base/{kept['backupId']}"), kept
    again = {**copy, "metadata": {"name": "ledger-again"}, "spec": {**copy["spec"], "replicas": 1, "restoreFrom": {
        "objectStore": copy["spec"]["restoreFrom"]["objectStore"]}}}
    nodes.kubectl("-n", ns, "apply", "-f", "-", input=json.dumps(again))
    wait_phase(nodes, ns, "ledger-again", timeout=600)
    rows = {int(x) for x in psql_in_server(nodes, ns, "ledger-again-0", "select string_agg(seq::text, ' ') from "
                                           "acked_writes", database="app").split()}
    acked = set(writes.acked) | set(last_writes.acked)
    assert len(last_writes.acked) >= 30 and not acked - rows, \
        f"rows acknowledged before the deletion missing after the final backup: {sorted(acked - rows)[:20]}"

    # Storage lost: ledger-pitr (three servers, archiving to its own path) deleted with its volumes and no final backup
    # (deletionPolicy Delete) while a writer writes. Restored from its archive with no target, the acknowledged rows
    # missing are the newest ones only, within the archive timeout (60 s by default) and the archiving of the last
    # segment: the recovery point, measured.
    base_backup("pitr-base", database="ledger-pitr")
    began = time.time()
    lost_writer = Writer(nodes, ns, "ledger-pitr", POSTGRES_IMAGE, name="writer-lost", start=2_000_000)
    lost_writer.wait_for_more(100)
    # (for longer than the archive timeout: its first rows reach the archive, its last ones may not)
    time.sleep(max(0.0, 100 - (time.time() - began)))
    nodes.kubectl("-n", ns, "patch", "sdb", "ledger-pitr", "--type=merge", "-p", '{"spec":{"deletionPolicy":"Delete"}}')
    nodes.kubectl("-n", ns, "delete", "sdb", "ledger-pitr", "--wait=false")
    wait_for("ledger-pitr and its volumes to be deleted", lambda: not nodes.core.list_namespaced_persistent_volume_claim(
        ns, label_selector="app.kubernetes.io/instance=ledger-pitr").items and nodes.kubectl(
        "-n", ns, "get", "sdb", "ledger-pitr", check=False).returncode != 0, timeout=300, interval=3)
    lost = lost_writer.stop()
    restored = {**again, "metadata": {"name": "ledger-lost"}, "spec": {**again["spec"], "restoreFrom": {
        "objectStore": {**again["spec"]["restoreFrom"]["objectStore"], "sourceName": "ledger-pitr"}}}}
    nodes.kubectl("-n", ns, "apply", "-f", "-", input=json.dumps(restored))
    wait_phase(nodes, ns, "ledger-lost", timeout=600)
    rows = {int(x) for x in psql_in_server(nodes, ns, "ledger-lost-0", "select string_agg(seq::text, ' ') from "
                                           "acked_writes where seq >= 2000000", database="app").split()}
    kept = {seq: at for seq, at in lost.acked.items() if seq in rows}
    missing = {seq: at for seq, at in lost.acked.items() if seq not in rows}
    assert kept, f"none of the {len(lost.acked)} rows written to ledger-pitr in {time.time() - began:.0f} s came back"
    assert all(at > max(kept.values()) for at in missing.values()), \
        f"a hole: rows missing before the newest one restored: {sorted(s for s in missing if s < max(kept))[:20]}"
    lost_seconds = max(lost.acked.values()) - max(kept.values())
    print(f"storage loss with archiveTimeout 60 s: {len(missing)} of {len(lost.acked)} acknowledged rows lost, "
          f"the last {lost_seconds:.1f} s of writes")
    # (the archive timeout, and the segment before it still uploading when the servers stopped)
    assert lost_seconds <= 2 * 60, (lost_seconds, len(missing))
