"""`python -m bench.backup`: issue 31's figures, measured on the local cluster of real nodes (`cluster --name nodes up
--real-node --nodes 3`, its object store beside the nodes) with the SampleDB operator as deployed. Prints a table next
to CloudNativePG's figures and the issue's goals, and writes it to bench/results/<date>-backup.md; asserts nothing
(the proofs are tests/e2e/test_continuous_backup.py).

- a database of --size-mb (one server): a physical base backup without compression and with gzip (request →
  Completed, and the Job's own time), a dump of it, a recovery of it from the object store into a new SampleDB (create
  → Ready: the newest base backup and the WAL archived since) and a restore of the dump (create → Ready);
- for each archive timeout in --archive-timeouts: three servers, a base backup, the writer running for --write-seconds
  while the primary's archive is read every 2 s (the age of the oldest WAL file waiting, and of the newest one
  archived), then the database deleted with its volumes and no final backup (deletionPolicy Delete) and restored from
  its archive with no target: the acknowledged rows lost, and the seconds of writes they span (the RPO).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import yaml

from bench.__main__ import write_table
from bench.e2e import Database, db_size_mb, delete_database, fill, sampledb_operator
from localcluster.cluster import LocalCluster
from tests.kube import Kube, wait_for
from tests.operator import ROOT
from tests.realnode import NODES, NODES_CLUSTER_NAME, POSTGRES_IMAGE
from tests.sampledb import BACKUPS, GROUP, PLURAL, RARE_SCHEDULE, VERSION, backup_status
from tests.writes import Writer

SAMPLE = ROOT / "deploy" / "samples" / "sampledb-objectstore.yaml"


def _sample() -> tuple[dict, dict]:
    """The sample's keys Secret and its spec.backup.objectStore."""
    docs = list(yaml.safe_load_all(SAMPLE.read_text()))
    secret = next(d for d in docs if d["kind"] == "Secret")
    store = next(d for d in docs if d["kind"] == "SampleDB")["spec"]["backup"]["objectStore"]
    return secret, store


def _backup_spec(store: dict, **extra: object) -> dict:
    return {"schedule": RARE_SCHEDULE, "retention": 7, "objectStore": store, **extra}


def take(kube: Kube, ns: str, name: str, database: str, method: str) -> tuple[float, dict]:
    """(request → Completed in seconds, the backup's status)."""
    t0 = time.time()
    kube.custom.create_namespaced_custom_object(GROUP, VERSION, ns, BACKUPS, {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "SampleDBBackup", "metadata": {"name": name},
        "spec": {"database": database, "method": method}})
    st = wait_for(f"backup {name}", lambda: (s := backup_status(kube, ns, name)).get("phase") in (
        "Completed", "Failed") and s, timeout=3600, interval=1)
    if st["phase"] != "Completed":
        raise RuntimeError(f"backup {name} failed: {st.get('message')}")
    return time.time() - t0, st


def job_seconds(st: dict) -> float:
    """The backup Job's own time (startedAt → completedAt, whole seconds)."""
    def at(value: str) -> float:
        return time.mktime(time.strptime(value, "%Y-%m-%dT%H:%M:%SZ"))
    return at(st["completedAt"]) - at(st["startedAt"])


def wait_settled(kube: Kube, ns: str, name: str) -> None:
    """The last spec change applied by a run (observedGeneration) and the database Ready."""
    def settled() -> bool:
        db = kube.custom.get_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, name)
        st = db.get("status") or {}
        return st.get("observedGeneration") == db["metadata"]["generation"] and st.get("phase") == "Ready"
    wait_for(f"{name} to apply its spec", settled, timeout=600, interval=1)


def archive_ages(kube: Kube, ns: str, pod: str) -> tuple[int, int] | None:
    """(the age of the oldest WAL file waiting to be archived, 0 when none; the age of the newest one archived) in
    seconds, as archive.sh --report says on the primary; None when it cannot be asked."""
    out = kube.kubectl("-n", ns, "exec", pod, "-c", "postgres", "--", "bash", "/etc/sampledb/archive.sh", "--report",
                       check=False)
    fields = dict(kv.split("=", 1) for kv in out.stdout.split() if "=" in kv)
    if out.returncode != 0 or not fields.get("now"):
        return None
    now = int(fields["now"])
    waiting = now - int(fields["oldest_ready"]) if int(fields.get("ready") or 0) and fields.get("oldest_ready") else 0
    newest = now - int(fields["last_ok"]) if fields.get("last_ok") else -1
    return max(waiting, 0), newest


def measure_data(kube: Kube, ns: str, store: dict, size_mb: int, add) -> None:
    big = Database(kube, ns, "big", replicas=1, storage={"size": "8Gi"},
                   backup=_backup_spec({**store, "compression": "none"}))
    t0 = time.time()
    fill(big, size_mb)
    size = db_size_mb(big)
    print(f"  filled {size:.0f} MB in {time.time() - t0:.0f} s", flush=True)
    took, st = take(kube, ns, "big-plain", "big", "physical")
    add(f"physical base backup of {size:.0f} MB, uncompressed (request → Completed; the Job {job_seconds(st):.0f} s)",
        "395 MB in 10.9 s (36 MB/s)", "MB/s reported", size / took, "MB/s")
    kube.custom.patch_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "big", {
        "spec": {"backup": _backup_spec({**store, "compression": "gzip"})}})
    wait_settled(kube, ns, "big")
    took, st = take(kube, ns, "big-gzip", "big", "physical")
    add(f"physical base backup of {size:.0f} MB, gzip (request → Completed; the Job {job_seconds(st):.0f} s)",
        "n/a", "MB/s reported", size / took, "MB/s")
    took, st = take(kube, ns, "big-dump", "big", "dump")
    add(f"dump of {size:.0f} MB, pg_dumpall piped to gzip (request → Completed; the Job {job_seconds(st):.0f} s)",
        "n/a", "MB/s reported", size / took, "MB/s")
    rows = big.sql(big.primary, "select count(*) from big")

    t0 = time.time()
    copy = Database(kube, ns, "big-pitr", replicas=1, storage={"size": "8Gi"}, backup=_backup_spec(store),
                    restoreFrom={"objectStore": {**store, "sourceName": "big"}})
    recovered = time.time() - t0
    assert copy.sql(copy.primary, "select count(*) from big") == rows
    copy.delete()
    t0 = time.time()
    dumped = Database(kube, ns, "big-copy", replicas=1, storage={"size": "8Gi"}, restoreFrom={"backup": "big-dump"})
    restored = time.time() - t0
    assert dumped.sql(dumped.primary, "select count(*) from big") == rows
    dumped.delete()
    add(f"recovery of {size:.0f} MB from the object store (gzip base backup + WAL; create → Ready, {recovered:.0f} s)",
        "395 MB in 7.6 s (≈ 19 s/GB)", "≤ 10 s/GB", recovered / (size / 1024), "s/GB")
    add(f"restore of the dump into a new SampleDB (create → Ready, {restored:.0f} s)", "n/a",
        "recovery ≥ 3x faster", restored / (size / 1024), "s/GB")
    add("recovery from the object store vs restore of the dump", "n/a", "≥ 3x", restored / recovered, "x")
    big.delete()


def measure_rpo(kube: Kube, ns: str, store: dict, timeout: int, seconds: int, add) -> None:
    name = f"rpo-{timeout}"
    db = Database(kube, ns, name, replicas=3, backup=_backup_spec(store, archiveTimeout=f"{timeout}s"))
    take(kube, ns, f"{name}-base", name, "physical")
    writer = Writer(kube, ns, name, POSTGRES_IMAGE, name=f"writer-{name}")
    ages = []
    end = time.time() + seconds
    while time.time() < end:
        if (age := archive_ages(kube, ns, db.primary)) is not None:
            ages.append(age)
        time.sleep(2)
    kube.custom.patch_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, name, {"spec": {"deletionPolicy": "Delete"}})
    delete_database(kube, ns, name)
    writes = writer.stop()
    kube.core.delete_namespaced_pod(f"writer-{name}", ns)
    t0 = time.time()
    copy = Database(kube, ns, f"{name}-lost", replicas=1, backup=_backup_spec(store),
                    restoreFrom={"objectStore": {**store, "sourceName": name}})
    recovered = time.time() - t0
    rows = {int(x) for x in copy.sql(copy.primary, "select string_agg(seq::text, ' ') from acked_writes").split()}
    copy.delete()
    kept = [at for seq, at in writes.acked.items() if seq in rows]
    lost = [seq for seq in writes.acked if seq not in rows]
    lost_seconds = max(writes.acked.values()) - max(kept) if kept else float("nan")
    waiting = [w for w, _ in ages]
    newest = [n for _, n in ages if n >= 0]
    add(f"RPO after total storage loss, archiveTimeout {timeout}s ({len(lost)} of {len(writes.acked)} acknowledged "
        f"rows lost; recovered in {recovered:.0f} s)", "≤ 300 s (its archive_timeout)",
        "≤ 60 s by default" if timeout == 60 else "reported", lost_seconds, "s")
    add(f"archive lag under the writer, archiveTimeout {timeout}s: the oldest WAL file waiting, median (max)",
        "n/a", "reported", statistics.median(waiting), "s", f" ({max(waiting)} s)")
    add(f"the newest WAL file archived, its age under the writer, archiveTimeout {timeout}s: median (max)",
        "n/a", f"≤ {timeout} s", statistics.median(newest), "s", f" ({max(newest)} s)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.backup", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size-mb", type=int, default=1024, help="the database backed up and recovered")
    parser.add_argument("--archive-timeouts", default="10,60", help="seconds, comma-separated: one RPO run each")
    parser.add_argument("--write-seconds", type=int, default=120, help="how long the writer writes before the loss")
    parser.add_argument("--skip", default="", help="comma-separated: data,rpo")
    args = parser.parse_args(argv)
    skip = set(filter(None, args.skip.split(",")))
    rows: list[list[str]] = []

    def add(what: str, cnpg: str, goal: str, value: float, unit: str, extra: str = "") -> None:
        rows.append([what, cnpg, goal, f"{value:.1f} {unit}{extra}"])
        print(f"  {rows[-1]}", flush=True)

    secret, store = _sample()
    cluster = LocalCluster(NODES_CLUSTER_NAME, real_node=True, nodes=NODES)
    with sampledb_operator("bench-backup", cluster) as (kube, ns, _):
        kube.kubectl("-n", ns, "apply", "-f", "-", input=json.dumps(secret))
        try:
            if "data" not in skip:
                measure_data(kube, ns, store, args.size_mb, add)
            if "rpo" not in skip:
                for timeout in (int(t) for t in args.archive_timeouts.split(",")):
                    measure_rpo(kube, ns, store, timeout, args.write_seconds, add)
        finally:  # (what was measured is written even when a section fails)
            if rows:
                write_table("backup", ["real nodes, real PostgreSQL, barman-cloud 3.19.1, versitygw", "CloudNativePG",
                                       "goal", "measured"], rows,
                            role="the SampleDB operator as deployed on the local cluster of three real nodes",
                            notes=["MB/s: the database's size (pg_database_size) over the time from the request to "
                                   "Completed; the Job's own time is beside it",
                                   "RPO: the seconds of acknowledged writes missing after a recovery with no target, "
                                   "from the newest row recovered to the newest acknowledged"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
