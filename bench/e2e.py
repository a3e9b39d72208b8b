"""`python -m bench.e2e`: what a user asks of SampleDB before trusting it, measured on the local cluster's real
node (`cluster --name e2e up --real-node`) with real PostgreSQL and a writer inserting one row per transaction
through the -primary Service (tests/writes.py). Prints a table next to CloudNativePG's budgets and the issue's
goals, and writes it to bench/results/<date>-e2e.md; asserts nothing (the proofs are tests/e2e).

Figures, each the median of --runs unless said:
- failover, the primary's pod deleted / its postmaster killed: the write downtime (the longest time between two
  acknowledged writes around the fault) and the old primary back as a replica (fault → it answers in recovery);
- switchover on request: the write downtime and the old primary back as a replica;
- rows lost (acknowledged, then not on the primary) per failover, in sync mode (the default) and in async mode;
- minor upgrade 15.18 → 15.20 (one run): the write downtime;
- backup and restore of a database of --size-mb: MB/s of each (one run), and its major upgrade 15 → 18.

`faults` (one run of each, its own table: bench/results/<date>-e2e-faults.md): issue 28's faults, each with the
writer running, its longest write gap around the fault and the rows lost (acknowledged, then not on the primary), the
load average when it began. On one 3-server database in sync mode: a storage-size edit (refused on local-path) then a
hung primary (its postmaster frozen, the lowest-ordinal replica's WAL receiver frozen: the most advanced replica is
promoted, by the operator as deployed); the former primary's way back (fault → it answers as a replica, and from its
container's restart) by pg_rewind, then the same fault with a clone forced (the entrypoint's own `$PGDATA.reclone`
mark, as a replica that fell behind leaves it); a deleted Lease; an empty volume under the primary (its PVC and pod
deleted); a setting that needs a restart (max_connections); a scale-down 3 → 2 with the primary on the highest
ordinal. Then a SampleDB deleted with Snapshot, another of the same name restored from its final backup, written to
and deleted again, and that final backup restored into three servers in sync and in async mode (create → Ready, every
row both writers had acknowledged present).

`nodes` (its own table: bench/results/<date>-e2e-nodes.md; alone with `--skip failover,async,minor,data,faults`):
issue 30's node faults on the local cluster of three real nodes (`cluster --name nodes up --real-node --nodes 3`),
--runs of each: the primary's node powered off, its kubelet stopped, it partitioned (tests/nodefaults.py), then each
node drained in turn; the median write gap of each next to the single-node figure of the nearest fault.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import yaml

from bench.__main__ import RESULTS, write_table
from bench.harness import OURS_READY, OperatorRun, median, ours
from localcluster import images
from localcluster.build import binary
from localcluster.cluster import LocalCluster
from localcluster.netnode import Fault as NodeFault
from tests.kube import Kube, wait_for
from tests.nodefaults import TERM, drain_each_node, primary_node_fault, repair_all
from tests.operator import ROOT, install_sampledb_crds, sampledb_watches
from tests.realnode import (
    AS_DEPLOYED_VARS,
    POSTGRES_IMAGE,
    as_deployed_args,
    delete_pod,
    deployed_credentials,
    freeze_postmaster,
    kill_postmaster,
    psql_in_server,
    ready_database,
    signal_in_server,
    wait_endpoints,
)
from tests.sampledb import GROUP, PLURAL, VERSION, backup, backup_status, condition, events, get, roles
from tests.writes import Writer, Writes, table_rows

SWITCHOVER = "sampledb.example.com/switchover-to"
Fault = Callable[[Kube, str, str], None]  # (kube, namespace, the primary's pod), as tests.realnode's faults


def delete_database(kube: Kube, ns: str, name: str) -> None:
    kube.custom.delete_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, name)
    wait_for(f"{name} to go", lambda: not [
        d for d in kube.custom.list_namespaced_custom_object(GROUP, VERSION, ns, PLURAL)["items"]
        if d["metadata"]["name"] == name], timeout=600)


class Database:
    def __init__(self, kube: Kube, ns: str, name: str, **spec: object) -> None:
        self.kube, self.ns, self.name = kube, ns, name
        ready_database(kube, ns, name, **{"deletionPolicy": "Delete", **spec})

    def status(self) -> dict:
        return get(self.kube, self.ns, self.name).get("status") or {}

    def wait_ready(self, timeout: float = 900, **expected: str) -> dict:
        def ready() -> dict | None:
            st = self.status()
            ok = st.get("phase") == "Ready" and all(st.get(k) == v for k, v in expected.items())
            return st if ok else None
        st = wait_for(f"{self.name} Ready {expected or ''}", ready, timeout=timeout, interval=0.5)
        wait_endpoints(self.kube, self.ns, f"{self.name}-primary", [st["currentPrimary"]])
        return st

    def delete(self) -> None:
        """Gone, with its volumes (deletionPolicy Delete): the node's CPU requests hold about one 3-server
        database of the sample's size at a time."""
        delete_database(self.kube, self.ns, self.name)

    @property
    def primary(self) -> str:
        return self.status()["currentPrimary"]

    def sql(self, pod: str, query: str, database: str = "app", check: bool = True) -> str:
        return psql_in_server(self.kube, self.ns, pod, query, database=database, check=check)

    def recovery(self, pod: str) -> str:
        """t (a replica), f (read-write), or '' (no answer)."""
        return self.sql(pod, "select pg_is_in_recovery()", "postgres", check=False)

    def in_recovery(self, pod: str) -> bool:
        return self.recovery(pod) == "t"

    def rows(self) -> set[int]:
        return table_rows(self.kube, self.ns, self.primary)

    def all_replicas_back(self) -> None:
        servers = sorted(roles(self.kube, self.ns, self.name))
        primary = self.primary
        for pod in servers:
            if pod != primary:
                wait_for(f"{pod} a replica", lambda p=pod: self.in_recovery(p), timeout=600, interval=1)


def switchover(kube: Kube, ns: str, pod: str) -> None:
    """Asks the primary's database for a switchover to its highest-ordinal other server."""
    name = pod.rsplit("-", 1)[0]
    wanted = next(p for p in sorted(roles(kube, ns, name), reverse=True) if p != pod)
    kube.custom.patch_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, name,
                                               {"metadata": {"annotations": {SWITCHOVER: wanted}}})


def change_of_primary(db: Database, writer: Writer, fault: Fault) -> dict[str, float]:
    """One fault on the current primary; waits until writes flow and the old primary is a replica again."""
    db.all_replicas_back()
    writer.wait_for_more(10, timeout=300)
    old = db.primary
    before = server_state(db, old)
    t0 = time.time()
    fault(db.kube, db.ns, old)

    def over() -> bool:
        # Either another server is the primary and the old one a replica, or the old one was restarted (a new
        # pod, or its container) and is the primary again, read-write, within the failover grace period.
        if db.primary != old:
            return db.in_recovery(old)
        st = db.status()
        return (server_state(db, old) != before and st.get("phase") == "Ready" and st.get("currentPrimary") == old
                and db.recovery(old) == "f")
    wait_for(f"the change of primary from {old} to be over", over, timeout=600, interval=0.5)
    back = time.time() - t0
    writer.wait_for_more(10, timeout=300)
    writes = writer.writes()
    gap = writes.longest_gap(t0, time.time())
    lost = len(set(writes.acked) - db.rows())
    stayed = db.primary == old
    print(f"  {fault.__name__} {old}: downtime {gap:.1f} s, "
          f"{'back as primary' if stayed else 'back as a replica'} {back:.1f} s, {lost} rows lost", flush=True)
    return {"downtime": gap, "back": back, "lost": lost, "stayed": float(stayed)}


def server_state(db: Database, pod: str) -> tuple[str, int]:
    """The pod's uid and its server container's restarts: either changes when the server was restarted."""
    try:
        p = db.kube.core.read_namespaced_pod(pod, db.ns)
    except Exception:
        return ("", -1)
    restarts = sum(c.restart_count for c in p.status.container_statuses or [])
    return (p.metadata.uid, restarts)


def fill(db: Database, size_mb: int) -> None:
    """About size_mb of table data: rows of 1 kB."""
    rows = size_mb * 1024 * 1024 // 1100
    db.sql(db.primary, "create table big (id bigint primary key, v text); "
                       f"insert into big select g, repeat(md5(g::text), 32) from generate_series(1, {rows}) g")


def db_size_mb(db: Database) -> float:
    return int(db.sql(db.primary, "select pg_database_size('app')")) / 1024 / 1024


@contextmanager
def sampledb_operator(prefix: str, cluster: LocalCluster | None = None,
                      nodes: bool = False) -> Iterator[tuple[Kube, str, OperatorRun]]:
    """The real-node cluster (``cluster``, else 'e2e') up, the SampleDB operator (this tree's roles; with ``nodes``, its
    Node watch too) running on a namespace of its own: (kube, namespace, operator); afterwards the namespace deleted
    while the operator runs, so that the SampleDBs' finalizers let them go."""
    cluster = cluster or LocalCluster("e2e", real_node=True)
    cluster.up(timeout=1200)
    cluster.load_images(include_operator=True)  # (the servers' Lease agent runs on the operator's image)
    kube = Kube(cluster.paths.kubeconfig, str(binary("kubectl")))
    install_sampledb_crds(kube)
    ns = f"{prefix}-{int(time.time())}"
    kube.kubectl("create", "namespace", ns)
    work = Path(tempfile.mkdtemp(prefix=f"{prefix}-"))
    watches = work / "watches.yaml"
    watches.write_text(yaml.safe_dump(sampledb_watches(nodes=nodes, **AS_DEPLOYED_VARS)))
    # as deployed: deploy/rbac's ServiceAccount, leader election, the production backoff and the roles' defaults
    credentials = deployed_credentials(kube, work / "kubeconfig")
    op = ours(kube, ns, watches, "--ansible-roles-path", str(ROOT / "roles"), *as_deployed_args(f"{prefix}-{ns[-10:]}"),
              extra_env={"KUBECONFIG": str(credentials), "K8S_AUTH_KUBECONFIG": str(credentials)})
    op.start(OURS_READY)
    try:
        yield kube, ns, op
    finally:
        kube.kubectl("delete", "namespace", ns, "--wait=false", check=False)
        try:
            wait_for("the SampleDBs to go", lambda: not kube.custom.list_namespaced_custom_object(
                GROUP, VERSION, ns, PLURAL)["items"], timeout=300)
        finally:
            op.stop()


# --- issue 28's faults, one run of each (--skip faults) -----------------------------------------------------------


NONE = "none"  # (the README has no figure for it)


def load() -> str:
    return f"load {os.getloadavg()[0]:.1f}"


class Faults:
    """The faults' table: one row per fault, and the rows already counted lost (each lost row is counted once)."""

    def __init__(self) -> None:
        self.rows: list[list[str]] = []
        self.missing: set[int] = set()

    def add(self, fault: str, gap: str, lost: str, other: str, readme: str) -> None:
        self.rows.append([fault, gap, lost, other, readme])
        print(f"  {fault}: gap {gap}, lost {lost}; {other}", flush=True)

    def after(self, db: Database, writer: Writer, t0: float) -> tuple[float, int, Writes]:
        """Once writes flow again: the longest write gap since ``t0`` and the acknowledged rows newly missing."""
        writer.wait_for_more(10, timeout=300)
        writes = writer.writes()
        missing = set(writes.acked) - db.rows()
        lost = len(missing - self.missing)
        self.missing |= missing
        return writes.longest_gap(t0, time.time()), lost, writes


def latest_event(kube: Kube, ns: str, reason: str) -> str:
    """The message of the Event of that reason recorded last ('' when there is none)."""
    seen = events(kube, ns, reason)
    return max(seen, key=lambda e: e.last_timestamp or e.first_timestamp or e.event_time).message if seen else ""


def event_count(kube: Kube, ns: str, reason: str) -> int:
    """How many times an Event of that reason was recorded (the API folds repeats into one Event with a count)."""
    return sum(e.count or 1 for e in events(kube, ns, reason))


def postgres_started(db: Database, pod: str) -> float | None:
    """When the pod's server container last started (epoch, to the second)."""
    p = db.kube.core.read_namespaced_pod(pod, db.ns)
    for c in p.status.container_statuses or []:
        if c.name == "postgres" and c.state and c.state.running and c.state.running.started_at:
            return c.state.running.started_at.timestamp()
    return None


def server_log(db: Database, pod: str) -> str:
    return db.kube.kubectl("-n", db.ns, "logs", pod, "-c", "postgres", check=False).stdout


def hung_primary(db: Database, writer: Writer, faults: Faults, *, clone: bool, one_behind: bool) -> dict:
    """The primary's postmaster frozen (a hung server: tests/e2e/test_safety.py's failover as deployed), optionally
    with the lowest-ordinal replica's WAL receiver frozen first (it falls behind: the other must be promoted) and
    optionally with a clone forced on the old primary's way back ($PGDATA.reclone, the mark the entrypoint leaves for
    itself when a replica can no longer catch up). Waits until another server is the primary and the old one answers
    as a replica."""
    db.all_replicas_back()
    writer.wait_for_more(10, timeout=300)
    old = db.primary
    others = sorted(p for p in roles(db.kube, db.ns, db.name) if p != old)
    behind, receiver = others[0], ""
    if one_behind:
        receiver = db.sql(behind, "select pid from pg_stat_wal_receiver", "postgres", check=False)
    if receiver:
        signal_in_server(db.kube, db.ns, behind, "STOP", receiver)
        writer.wait_for_more(20, timeout=300)  # acknowledged with the other replica: the frozen one misses them
    if clone:
        db.kube.kubectl("-n", db.ns, "exec", old, "-c", "postgres", "--", "bash", "-c", 'touch "$PGDATA.reclone"')
    failed_over = event_count(db.kube, db.ns, "FailedOver")
    la = load()
    t0 = time.time()
    freeze_postmaster(db.kube, db.ns, old)
    try:
        new = wait_for("another primary", lambda: (p := db.status().get("currentPrimary")) not in (None, old) and p,
                       timeout=600, interval=0.5)
    finally:
        if receiver:
            signal_in_server(db.kube, db.ns, behind, "CONT", receiver)
    promoted = time.time() - t0
    wait_for(f"{old} back as a replica", lambda: db.in_recovery(old), timeout=900, interval=0.5)
    back_at = time.time()
    started = postgres_started(db, old)
    gap, lost, _ = faults.after(db, writer, t0)
    log = server_log(db, old)
    way = ("rewind" if "rewound: it follows the new primary" in log and "cloning the primary" not in log
           else "clone" if "cloning the primary" in log else "?")
    message = latest_event(db.kube, db.ns, "FailedOver") if event_count(db.kube, db.ns, "FailedOver") > failed_over else ""
    return {"old": old, "new": new, "behind": behind, "gap": gap, "lost": lost, "promoted": promoted,
            "back": back_at - t0, "from_restart": back_at - started if started else float("nan"), "way": way,
            "load": la, "most_advanced": new != behind, "event": message}


def rejoin_note(r: dict) -> str:
    return (f"{r['old']} → {r['new']}; old primary a replica by {r['way']} {r['back']:.1f} s after the fault "
            f"({r['from_restart']:.1f} s after its container restarted); {r['load']}")


def measure_faults(kube: Kube, ns: str, faults: Faults, rejoin_mb: int, cpu: str = "") -> None:
    """``cpu``: each server's CPU request instead of the sample's (250m), so that three servers fit a node that other
    runs share (a request only reserves a share for scheduling; nothing limits a server's CPU)."""
    rows = faults.add
    spec: dict = {"resources": {"requests": {"cpu": cpu, "memory": "512Mi"}, "limits": {"memory": "1Gi"}}} if cpu else {}
    # one 3-server database in sync mode (the default) for the faults of a running database
    db = Database(kube, ns, "flt", replicas=3, **spec)
    if rejoin_mb:
        fill(db, rejoin_mb)  # so that a clone has something to copy
    size = db_size_mb(db)
    writer = Writer(kube, ns, "flt", POSTGRES_IMAGE, name="writer-flt")

    # a storage-size edit (refused: local-path cannot grow volumes), then a failover as deployed
    was = get(kube, ns, "flt")["spec"]["storage"]["size"]
    bigger = f"{int(was.removesuffix('Gi')) + 1}Gi"
    kube.custom.patch_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "flt",
                                               {"spec": {"storage": {"size": bigger}}})
    try:
        refused = wait_for("the storage edit refused in status", lambda: (
            c := condition(get(kube, ns, "flt"), "Degraded")).get("reason") == "StorageNotGrown" and c,
            timeout=180, interval=1)["reason"]
    except Exception:
        refused = "not refused in status within 180 s"
    r = hung_primary(db, writer, faults, clone=False, one_behind=True)
    rows(f"failover as deployed after a storage-size edit ({was} → {bigger}: {refused}): primary hung, "
         "one replica's stream frozen", f"{r['gap']:.1f} s", str(r["lost"]),
         f"most advanced promoted: {'yes' if r['most_advanced'] else 'NO'} ({r['behind']} behind); "
         f"new primary in status {r['promoted']:.1f} s after the fault; {r['load']}",
         "50.0 s (hung primary, `bench.failover_timeline freeze`, quiet machine)")
    kube.custom.patch_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "flt", {"spec": {"storage": {"size": was}}})
    rows(f"rejoin of the former primary by rewind ({size:.0f} MB database)", f"{r['gap']:.1f} s (the failover above)",
         str(r["lost"]), rejoin_note(r), "20.8 s after a switchover (12.3 to 29.2)")
    try:
        wait_for("Degraded to clear", lambda: condition(get(kube, ns, "flt"), "Degraded").get("status") == "False",
                 timeout=180, interval=2)
    except Exception as exc:
        print(f"  (the storage edit taken back: {exc})", flush=True)

    r = hung_primary(db, writer, faults, clone=True, one_behind=False)
    rows(f"rejoin of the former primary by a fresh clone (forced; {size:.0f} MB database)", f"{r['gap']:.1f} s",
         str(r["lost"]), rejoin_note(r), NONE)

    # a lost Lease: recorded again, nothing changes hands
    db.all_replicas_back()
    writer.wait_for_more(10, timeout=300)
    old, recorded, la, t0 = db.primary, event_count(kube, ns, "PrimaryRecorded"), load(), time.time()
    kube.coordination.delete_namespaced_lease("flt-primary", ns)
    wait_for("the Lease recorded again", lambda: event_count(kube, ns, "PrimaryRecorded") > recorded, timeout=180)
    writer.wait_for_more(20, timeout=300)
    gap, lost, _ = faults.after(db, writer, t0)
    rows("a lost Lease (deleted)", f"{gap:.1f} s", str(lost),
         f"primary kept: {'yes' if db.primary == old else 'NO, ' + db.primary}; recorded again "
         f"{time.time() - t0:.1f} s after; {la}", NONE)

    # an empty volume under the primary: a replica with the data promoted, the new server clones it
    db.all_replicas_back()
    writer.wait_for_more(10, timeout=300)
    old, la, t0 = db.primary, load(), time.time()
    kube.core.delete_namespaced_persistent_volume_claim(f"data-{old}", ns)
    kube.core.delete_namespaced_pod(old, ns)
    new = wait_for("another primary", lambda: (p := db.status().get("currentPrimary")) not in (None, old) and p,
                   timeout=600, interval=0.5)
    promoted = time.time() - t0
    wait_for(f"{old} back as a replica", lambda: db.in_recovery(old), timeout=900, interval=1)
    back = time.time() - t0
    gap, lost, _ = faults.after(db, writer, t0)
    log = server_log(db, old)
    how = "cloned" if "cloning the primary" in log else "?"
    how += ", INITIALISED" if "initialising a new database" in log else ", never initialised"
    rows("an empty volume under the primary (its PVC and pod deleted)", f"{gap:.1f} s", str(lost),
         f"{old} → {new} in status {promoted:.1f} s after; {old} a replica ({how}) after {back:.1f} s; {la}", NONE)

    # a setting that needs a restart, rolled with a switchover (none of it a failover)
    db.all_replicas_back()
    writer.wait_for_more(10, timeout=300)
    before = {p.metadata.name: p.metadata.uid for p in kube.core.list_namespaced_pod(
        ns, label_selector="app.kubernetes.io/instance=flt,statefulset.kubernetes.io/pod-name").items}
    connections = int(db.sql(db.primary, "show max_connections", "postgres")) + 20
    failed_over, switched = event_count(kube, ns, "FailedOver"), event_count(kube, ns, "SwitchedOver")
    la, t0 = load(), time.time()
    kube.custom.patch_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "flt", {
        "spec": {"parameters": {"max_connections": str(connections)}}})

    def restarted() -> bool:
        now = {p.metadata.name: p.metadata.uid for p in kube.core.list_namespaced_pod(
            ns, label_selector="app.kubernetes.io/instance=flt,statefulset.kubernetes.io/pod-name").items
            if not p.metadata.deletion_timestamp}
        return (now.keys() == before.keys() and all(now[p] != before[p] for p in now)
                and db.status().get("phase") == "Ready")
    wait_for("every server restarted on the new configuration", restarted, timeout=900, interval=2)
    took = time.time() - t0
    db.all_replicas_back()
    gap, lost, _ = faults.after(db, writer, t0)
    rows(f"a configuration change that needs a restart (max_connections → {connections}, 3 servers)",
         f"{gap:.1f} s", str(lost),
         f"{took:.0f} s in all; switchovers {event_count(kube, ns, 'SwitchedOver') - switched}, "
         f"failovers {event_count(kube, ns, 'FailedOver') - failed_over}; {la}",
         "2.9 s (minor upgrade, the same rolling order)")

    # a scale-down 3 → 2 with the primary on the highest ordinal
    if db.primary != "flt-2":
        switchover(kube, ns, db.primary)
        wait_for("flt-2 the primary", lambda: (st := db.status()).get("currentPrimary") == "flt-2"
                 and st.get("phase") == "Ready", timeout=300, interval=1)
    db.all_replicas_back()
    writer.wait_for_more(10, timeout=300)
    failed_over, switched = event_count(kube, ns, "FailedOver"), event_count(kube, ns, "SwitchedOver")
    la, t0 = load(), time.time()
    kube.custom.patch_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "flt", {"spec": {"replicas": 2}})
    wait_for("two servers left, the primary among them", lambda: sorted(roles(kube, ns, "flt")) == ["flt-0", "flt-1"]
             and (st := db.status()).get("currentPrimary") in ("flt-0", "flt-1") and st.get("phase") == "Ready",
             timeout=600, interval=1)
    took = time.time() - t0
    gap, lost, _ = faults.after(db, writer, t0)
    rows("a scale-down 3 → 2 with the primary on the highest ordinal", f"{gap:.1f} s", str(lost),
         f"{took:.0f} s in all; switchovers {event_count(kube, ns, 'SwitchedOver') - switched}, "
         f"failovers {event_count(kube, ns, 'FailedOver') - failed_over}; {la}",
         "2.5 s (switchover on request)")
    writer.stop()
    kube.core.delete_namespaced_pod("writer-flt", ns, grace_period_seconds=0)
    db.delete()

    # a reused name deleted with Snapshot, then its final backup restored into three servers in each mode
    snap = Database(kube, ns, "snap", replicas=2, deletionPolicy="Snapshot", **spec)
    writer = Writer(kube, ns, "snap", POSTGRES_IMAGE, name="writer-snap")
    writer.wait_for_more(20, timeout=300)
    first_final = f"snap-final-{get(kube, ns, 'snap')['metadata']['uid'][:8]}"
    la, t0 = load(), time.time()
    snap.delete()
    first_took = time.time() - t0
    first = writer.stop()
    kube.core.delete_namespaced_pod("writer-snap", ns, grace_period_seconds=0)
    snap = Database(kube, ns, "snap", replicas=2, deletionPolicy="Snapshot", restoreFrom={"backup": first_final},
                    **spec)
    second_final = f"snap-final-{get(kube, ns, 'snap')['metadata']['uid'][:8]}"
    writer = Writer(kube, ns, "snap", POSTGRES_IMAGE, name="writer-snap2", start=max(first.acked) + 1000)
    writer.wait_for_more(20, timeout=300)
    t0 = time.time()
    snap.delete()
    second_took = time.time() - t0
    second = writer.stop()
    kube.core.delete_namespaced_pod("writer-snap2", ns, grace_period_seconds=0)
    acked = set(first.acked) | set(second.acked)
    for mode in ("sync", "async"):
        la, t0 = load(), time.time()
        copy = Database(kube, ns, f"copy-{mode}", replicas=3, replication={"mode": mode},
                        restoreFrom={"backup": second_final}, **spec)
        ready = time.time() - t0
        primary = copy.primary
        wait_for(f"{mode}: both replicas streaming", lambda p=primary, c=copy: c.sql(
            p, "select count(*) from pg_stat_replication where state = 'streaming'", "postgres", check=False) == "2",
            timeout=300, interval=2)
        streaming = time.time() - t0
        lost = len(acked - copy.rows())
        if mode == "sync":
            rows(f"a second SampleDB of a reused name deleted with Snapshot ({second_final}, not {first_final})",
                 "n/a (deleted)", str(lost),
                 f"rows of both writers missing from its final backup; delete → gone {first_took:.0f} s, "
                 f"{second_took:.0f} s; {la}", NONE)
        rows(f"restore into three servers, {mode} mode ({len(acked)} acknowledged rows)", "n/a (a new database)",
             str(lost), f"create → Ready {ready:.0f} s, both replicas streaming {streaming:.0f} s; {la}",
             "33 s (1 server, 1,118 MB)")
        copy.delete()


FAULTS_COLUMNS = ["fault (real node, operator as deployed, writer running; one run)", "longest write gap",
                  "rows lost", "what happened", "README now"]
FAULTS_NOTES = ["longest write gap: the longest time between two acknowledged writes (one row per transaction and "
                "connection, through the -primary Service) from the fault until 10 more writes were acknowledged",
                "rows lost: acknowledged rows missing from the primary afterwards (for Snapshot and the restores: "
                "from the restored database)",
                "load: the 1-minute load average when the fault began (2 cores, shared with other engineers' tests)",
                "README now: the README's Benchmarks figure nearest to it (its e2e table and text), "
                "none where it has none"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.e2e", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3, help="runs of each change of primary (median)")
    parser.add_argument("--size-mb", type=int, default=1024, help="database size for backup, restore, major upgrade")
    parser.add_argument("--rejoin-size-mb", type=int, default=64,
                        help="data in the faults' database before its writer starts (what a clone copies)")
    parser.add_argument("--cpu-request", default="",
                        help="faults: each server's CPU request (default: the sample's), for a node that others share")
    parser.add_argument("--skip", default="", help="comma-separated: failover,async,minor,data,faults,nodes")
    args = parser.parse_args(argv)
    skip = set(filter(None, args.skip.split(",")))
    rows: list[list[str]] = []
    faults = Faults()

    def add(what: str, cnpg: str, goal: str, values: list[float], unit: str = "s", fmt: str = "{:.1f}") -> None:
        shown = (f"{fmt.format(median(values))} {unit} (min {fmt.format(min(values))}, max {fmt.format(max(values))}, "
                 f"n={len(values)})" if len(values) > 1 else f"{fmt.format(values[0])} {unit}")
        rows.append([what, cnpg, goal, shown])

    if skip >= {"failover", "async", "minor", "data", "faults"}:
        if "nodes" not in skip:
            measure_nodes(args, rows)
        return 0
    with sampledb_operator("bench-e2e") as (kube, ns, _):
        try:
            sections(kube, ns, args, skip, add, faults)
        finally:  # (what was measured is written even when a section fails or the run is stopped)
            if faults.rows:
                write_table("e2e-faults", FAULTS_COLUMNS, faults.rows, notes=FAULTS_NOTES,
                            role="the SampleDB operator as deployed (deploy/rbac's ServiceAccount, leader election) "
                                 "on the local cluster's real node")
            if rows:
                write_table("e2e", [f"real node, real PostgreSQL, writer running; {args.runs} runs", "CloudNativePG",
                                    "goal", "measured (median)"], rows,
                            role="the SampleDB operator (this repository's watches.yaml) on the local cluster's real "
                                 "node",
                            notes=["write downtime: the longest time between two acknowledged writes (one row per "
                                   "transaction and connection, through the -primary Service) from the fault until "
                                   "writes flow again",
                                   "CloudNativePG: the budgets of its own e2e tests (failover, switchover) as the issue "
                                   "lists them"])
    if "nodes" not in skip:
        measure_nodes(args, rows)
    return 0


# --- issue 30's node faults, on the local cluster of three real nodes (--skip nodes) ----------------------------------


NODE_FAULTS = [  # (what, fault, repair, the single-node row it compares with, the goal)
    ("primary's node powered off", NodeFault.POWEROFF, NodeFault.POWERON, "failover: primary pod deleted", "≤ 30 s"),
    ("kubelet of the primary's node stopped", NodeFault.KUBELET_STOP, NodeFault.KUBELET_START,
     "failover: postgres killed", "≤ 30 s"),
    ("primary's node partitioned", NodeFault.PARTITION, NodeFault.HEAL, "failover: postgres killed", "≤ 30 s"),
]


def single_node_figures(rows: list[list[str]]) -> dict[str, str]:
    """The single-node table's measured column by the start of its first column: this run's, else the newest one
    written (bench/results/*-e2e.md)."""
    if not rows:
        newest = sorted(RESULTS.glob("*-e2e.md"))
        rows = [[c.strip() for c in line.strip().strip("|").split("|")]
                for line in (newest[-1].read_text().splitlines() if newest else []) if line.startswith("| ")]
    return {r[0]: f"{r[-1]}" for r in rows if len(r) >= 2}


def measure_nodes(args: argparse.Namespace, rows: list[list[str]]) -> None:
    """Each node fault hits the primary's node of a new 3-server database (sync mode, the writer and the checker on
    another node) --runs times, then each node is drained in turn: the median write gap of each, next to the
    single-node figure of the nearest fault."""
    cluster = LocalCluster("nodes", real_node=True, nodes=3)
    single = single_node_figures(rows)

    def near(label: str) -> str:
        return next((v for k, v in single.items() if k.startswith(label)), "n/a")

    table: list[list[str]] = []

    def shown(values: list[float]) -> str:
        return (f"{median(values):.1f} s (min {min(values):.1f}, max {max(values):.1f}, n={len(values)})"
                if len(values) > 1 else f"{values[0]:.1f} s" if values else "n/a")

    def gone(kube: Kube, ns: str, name: str, pods: list[str]) -> None:
        delete_database(kube, ns, name)
        for pod in pods:
            kube.kubectl("-n", ns, "delete", "pod", pod, "--wait=false", check=False)

    with sampledb_operator("bench-nodes", cluster, nodes=True) as (kube, ns, _):
        try:
            for what, fault, repair, nearest, goal in NODE_FAULTS:
                gaps, lost, failed = [], 0, []
                for i in range(args.runs):
                    repair_all(kube, cluster)
                    name = f"{fault.value[:4].replace('-', '')}{i}"
                    try:  # (a run that fails is reported, and the others still count)
                        out = primary_node_fault(kube, cluster, ns, name, fault, repair, pod_suffix=f"-{name}",
                                                 deletionPolicy="Delete")
                        gaps.append(out.gap)
                        lost += len(out.lost)
                    except Exception as exc:
                        failed.append(f"run {i + 1}: {str(exc).splitlines()[0][:200]}")
                        print(f"  {what}, run {i + 1} failed: {exc}", flush=True)
                    finally:
                        gone(kube, ns, name, [f"writer-{name}", f"checker-{name}"])
                table.append([what, goal, shown(gaps), f"{lost} rows" + "".join(
                    f"; {f}" for f in failed), near(nearest)])
            repair_all(kube, cluster)
            drains: dict[bool, list[float]] = {True: [], False: []}
            for i in range(args.runs):
                db = Database(kube, ns, f"drain{i}", replicas=3)
                writer = Writer(kube, ns, db.name, POSTGRES_IMAGE, name=f"writer-drain{i}")
                writer.wait_for_more(10)
                gaps = drain_each_node(kube, ns, db.name, writer)
                for _, held, gap in gaps:
                    drains[held].append(gap)
                writes = writer.stop()
                lost = len(set(writes.acked) - db.rows())
                gone(kube, ns, db.name, [writer.name])
                table.append([f"each node drained in turn (run {i + 1})", "≤ 3 s", ", ".join(
                    f"{node}: {gap:.1f} s" + (" (primary)" if held else "") for node, held, gap in gaps),
                    f"{lost} rows", near("switchover")])
            table.append(["drain of the primary's node (all runs)", "≤ 3 s", shown(drains[True]), "", near("switchover")])
            table.append(["drain of a replica's node (all runs)", "none", shown(drains[False]), "", "n/a"])
        finally:
            if table:
                write_table("e2e-nodes", ["fault (3 real nodes, 3 servers, sync mode, writer running)", "goal",
                                          "write gap (median)", "rows lost", "one node: nearest figure"], table,
                            role="the SampleDB operator as deployed (deploy/rbac's ServiceAccount, leader election) "
                                 "on the local cluster of three real nodes",
                            notes=["write gap: the longest time between two acknowledged writes (one row per "
                                   "transaction and connection, through the -primary Service) from the fault until "
                                   "20 more writes were acknowledged (drains: from the drain until 5 more)",
                                   "one node: the single-node table's median for the nearest fault (this run's, or "
                                   "the newest bench/results/*-e2e.md)",
                                   f"the primary's term: {TERM} s (spec.failover.termSeconds); a lost node is noticed "
                                   "by the operator when the node controller marks its pods not Ready",
                                   "rows lost: a run that loses an acknowledged row fails (its message is in the "
                                   "column), as the proofs do",
                                   "the load average in the header: the single-node cluster may be up too"])


def sections(kube: Kube, ns: str, args: argparse.Namespace, skip: set[str], add: Callable[..., None],
             faults: Faults) -> None:
    if "failover" not in skip:
        db = Database(kube, ns, "ha", replicas=3)
        writer = Writer(kube, ns, "ha", POSTGRES_IMAGE, name="writer-ha")
        results: dict[str, list[dict[str, float]]] = {f.__name__: [] for f in (delete_pod, kill_postmaster,
                                                                               switchover)}
        for _ in range(args.runs):
            for fault in (delete_pod, kill_postmaster, switchover):
                results[fault.__name__].append(change_of_primary(db, writer, fault))
        writer.stop()
        db.delete()
        for name, label, goal in (("delete_pod", "failover: primary pod deleted → writes accepted again", "≤ 10 s"),
                                  ("kill_postmaster", "failover: postgres killed → writes accepted", "≤ 10 s"),
                                  ("switchover", "switchover write downtime", "≤ 3 s")):
            add(label, "20 s budget", goal, [r["downtime"] for r in results[name]])
        replaced = [r["back"] for rs in results.values() for r in rs if not r["stayed"]]
        if replaced:
            add("old primary back as replica (after a change of primary)", "60 s budget", "≤ 30 s", replaced)
        stayed = [r["back"] for rs in results.values() for r in rs if r["stayed"]]
        if stayed:
            add("old primary back as the primary (restarted within the failover grace period)", "n/a",
                "n/a", stayed)
        add("rows lost, sync mode (all of the above)", "0", "0",
            [sum(r["lost"] for rs in results.values() for r in rs)], unit="rows", fmt="{:.0f}")
    if "async" not in skip:
        adb = Database(kube, ns, "fast", replicas=3, replication={"mode": "async"})
        writer = Writer(kube, ns, "fast", POSTGRES_IMAGE, name="writer-fast")
        lost = [change_of_primary(adb, writer, fault)["lost"] for _ in range(args.runs)
                for fault in (delete_pod, kill_postmaster)]
        writer.stop()
        adb.delete()
        add("rows lost per failover, async mode", "n/a", "reported", lost, unit="rows", fmt="{:.0f}")
    if "minor" not in skip:
        old, new = images.POSTGRES_VERSIONS[0], images.POSTGRES_VERSIONS[1]
        mdb = Database(kube, ns, "minor", replicas=3, version=old)
        writer = Writer(kube, ns, "minor", POSTGRES_IMAGE, name="writer-minor")
        writer.wait_for_more(10)
        t0 = time.time()
        kube.custom.patch_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "minor", {"spec": {"version": new}})
        mdb.wait_ready(version=new)
        took = time.time() - t0
        writer.wait_for_more(10)
        writes = writer.stop()
        lost = len(set(writes.acked) - mdb.rows())
        mdb.delete()
        add(f"minor upgrade {old} → {new} write downtime ({took:.0f} s in all, {lost} rows lost)", "(switchover)",
            "≤ 3 s", [writes.longest_gap(t0, time.time())])
    if "data" not in skip:
        ddb = Database(kube, ns, "big", replicas=1, version=images.POSTGRES_VERSIONS[0])
        t0 = time.time()
        fill(ddb, args.size_mb)
        size = db_size_mb(ddb)
        print(f"  filled {size:.0f} MB in {time.time() - t0:.0f} s", flush=True)
        t0 = time.time()
        backup(kube, ns, "big-b", database="big")
        wait_for("the backup", lambda: backup_status(kube, ns, "big-b").get("phase") == "Completed",
                 timeout=3600, interval=1)
        took = time.time() - t0
        add(f"backup of a {size:.0f} MB database (request → Completed, {took:.0f} s)", "n/a", "MB/s reported",
            [size / took], unit="MB/s")
        t0 = time.time()
        copy = Database(kube, ns, "big-copy", replicas=1, version=images.POSTGRES_VERSIONS[0],
                        restoreFrom={"backup": "big-b"})
        took = time.time() - t0
        assert copy.sql(copy.primary, "select count(*) from big") == ddb.sql(ddb.primary, "select count(*) from big")
        add(f"restore of it into a new SampleDB (create → Ready, {took:.0f} s)", "n/a", "MB/s reported",
            [size / took], unit="MB/s")
        t0 = time.time()
        new = images.POSTGRES_VERSIONS[-1]
        kube.custom.patch_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "big", {
            "spec": {"version": new, "upgrade": {"allowMajor": True}}})
        ddb.wait_ready(timeout=3600, version=new)
        add(f"major upgrade {images.POSTGRES_VERSIONS[0]} → {new} of {size:.0f} MB (request → Ready)", "n/a",
            "reported", [time.time() - t0])
    if "faults" not in skip:
        measure_faults(kube, ns, faults, args.rejoin_size_mb, args.cpu_request)

if __name__ == "__main__":
    raise SystemExit(main())
