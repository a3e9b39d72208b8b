"""Continuous archiving to the local cluster's object store (versitygw beside the nodes, barman-cloud in the servers):
deploy/samples/sampledb-objectstore.yaml as a user applies it archives its WAL, segment by segment, to the store, where
barman-cloud gets the very bytes back; an outage and a failover during it leave no hole; physical base backups, restore
drills, recovery to a point in time and after the loss of every volume. On the cluster of three real nodes, with the
operator as deployed. (What a user gets wrong in the settings: tests/e2e/test_objectstore_settings.py.)"""

from __future__ import annotations

import itertools
import json
import re
import time

import yaml

from localcluster.cluster import LocalCluster
from localcluster.netnode import StoreAction
from localcluster.node import OBJECTSTORE_SECRET_KEY
from tests.kube import Kube, wait_for
from tests.objectstore import (
    ENDPOINT,
    SAMPLE,
    archived_files,
    condition,
    poke,
    run_pod,
    segments,
    switch_and_archive,
    wait_condition,
)
from tests.realnode import NODES_LANE, POSTGRES_IMAGE, freeze_postmaster, psql_in_server
from tests.sampledb import GROUP, PLURAL, VERSION, backup, backup_status, events, get, wait_phase
from tests.writes import Writer

pytestmark = NODES_LANE


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
    # and how far forward: the newest segment archived, after the newest base backup's end (one is written and
    # switched: an idle primary archives nothing new, and a backup taken from a replica writes nothing on it)
    switch_and_archive(nodes, ns, primary)
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
    assert len(during) >= 10, "the writer wrote while the store was down"
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
