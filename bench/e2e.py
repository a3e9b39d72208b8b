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
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import yaml

from bench.__main__ import write_table
from bench.harness import OURS_READY, OperatorRun, median, ours
from localcluster import images
from localcluster.build import binary
from localcluster.cluster import LocalCluster
from tests.kube import Kube, wait_for
from tests.operator import ROOT, install_sampledb_crds, sampledb_watches
from tests.realnode import (
    AS_DEPLOYED_VARS,
    POSTGRES_IMAGE,
    as_deployed_args,
    delete_pod,
    deployed_credentials,
    kill_postmaster,
    psql_in_server,
    ready_database,
    wait_endpoints,
)
from tests.sampledb import GROUP, PLURAL, VERSION, backup, backup_status, get, roles
from tests.writes import Writer, table_rows

SWITCHOVER = "sampledb.example.com/switchover-to"
Fault = Callable[[Kube, str, str], None]  # (kube, namespace, the primary's pod), as tests.realnode's faults


class Database:
    def __init__(self, kube: Kube, ns: str, name: str, **spec: object) -> None:
        self.kube, self.ns, self.name = kube, ns, name
        ready_database(kube, ns, name, deletionPolicy="Delete", **spec)

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
        self.kube.custom.delete_namespaced_custom_object(GROUP, VERSION, self.ns, PLURAL, self.name)
        wait_for(f"{self.name} to go", lambda: not [
            d for d in self.kube.custom.list_namespaced_custom_object(GROUP, VERSION, self.ns, PLURAL)["items"]
            if d["metadata"]["name"] == self.name], timeout=600)

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
def sampledb_operator(prefix: str) -> Iterator[tuple[Kube, str, OperatorRun]]:
    """The real-node cluster up, the SampleDB operator (this tree's roles) running on a namespace of its own:
    (kube, namespace, operator); afterwards the namespace deleted while the operator runs, so that the SampleDBs' finalizers let them go."""
    cluster = LocalCluster("e2e", real_node=True)
    cluster.up(timeout=1200)
    kube = Kube(cluster.paths.kubeconfig, str(binary("kubectl")))
    install_sampledb_crds(kube)
    ns = f"{prefix}-{int(time.time())}"
    kube.kubectl("create", "namespace", ns)
    work = Path(tempfile.mkdtemp(prefix=f"{prefix}-"))
    watches = work / "watches.yaml"
    watches.write_text(yaml.safe_dump(sampledb_watches(**AS_DEPLOYED_VARS)))
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.e2e", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3, help="runs of each change of primary (median)")
    parser.add_argument("--size-mb", type=int, default=1024, help="database size for backup, restore, major upgrade")
    parser.add_argument("--skip", default="", help="comma-separated: failover,async,minor,data")
    args = parser.parse_args(argv)
    skip = set(filter(None, args.skip.split(",")))
    rows: list[list[str]] = []

    def add(what: str, cnpg: str, goal: str, values: list[float], unit: str = "s", fmt: str = "{:.1f}") -> None:
        shown = (f"{fmt.format(median(values))} {unit} (min {fmt.format(min(values))}, max {fmt.format(max(values))}, "
                 f"n={len(values)})" if len(values) > 1 else f"{fmt.format(values[0])} {unit}")
        rows.append([what, cnpg, goal, shown])

    with sampledb_operator("bench-e2e") as (kube, ns, _):
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
    write_table("e2e", [f"real node, real PostgreSQL, writer running; {args.runs} runs", "CloudNativePG", "goal",
                        "measured (median)"], rows,
                role="the SampleDB operator (this repository's watches.yaml) on the local cluster's real node",
                notes=["write downtime: the longest time between two acknowledged writes (one row per transaction "
                       "and connection, through the -primary Service) from the fault until writes flow again",
                       "CloudNativePG: the budgets of its own e2e tests (failover, switchover) as the issue lists them"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
