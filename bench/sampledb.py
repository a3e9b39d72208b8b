"""`python -m bench.sampledb`: the SampleDB operator's own figures on the local control plane, for 3-server
databases: create → Ready, a minor upgrade (15.8 → 15.9, replicas first, primary last) → Ready on the new
version, and failover (the primary's pod deleted → another pod primary in status and labelled).

kwok's stage delays are set to 0 for the database pods and Jobs (kwok's defaults are arbitrary simulated
delays), and failover_grace_seconds to 0: in production a failover also waits that grace (10 s by default)
before promoting. A failover promotes once the old primary's server has stopped (until then it might still
write). kwok's pods run nothing, so the bench plays the kubelet: the deleted primary's pod stays for 60 s (kwok's
deletion delay; a pod of the same name back at once would just be the primary again, not a failover) and its
status says what a kubelet's would once PostgreSQL's fast shutdown is done: server container terminated, pod
not Ready. For the same reason a switchover's old primary never stops by itself on kwok, so every switchover
waits out the fence timeout and deletes that pod: the upgrade runs with fence_timeout_seconds 3, as the kwok
tests do (30 s by default).
Prints a table and writes it to bench/results/<date>-sampledb.md."""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import yaml

from bench.__main__ import write_table
from bench.harness import OURS_READY, bench_cluster, delete_namespace, fresh_namespace, median, ours
from tests.kube import Kube, wait_for
from tests.operator import ROOT, install_sampledb_crds, sampledb_watches
from tests.sampledb import GROUP, PLURAL, VERSION, get, sample


def watches_file() -> Path:
    path = Path(tempfile.mkdtemp(prefix="bench-sampledb-")) / "sampledb-watches.yaml"
    path.write_text(yaml.safe_dump(sampledb_watches(failover_grace_seconds=0, fence_timeout_seconds=3)))
    return path


def status(kube: Kube, ns: str, name: str) -> dict:
    return get(kube, ns, name).get("status") or {}


def one_database(kube: Kube, ns: str, name: str, upgrade: bool = True) -> dict[str, float]:
    doc = sample(name, version="15.8")  # kwok: the version names images, 15.9 is the minor upgrade
    t0 = time.monotonic()
    kube.custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, doc)
    wait_for("Ready", lambda: status(kube, ns, name).get("phase") == "Ready", timeout=300, interval=0.1)
    created = time.monotonic() - t0

    figures = {"create": created}
    if upgrade:
        t0 = time.monotonic()
        kube.custom.patch_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, name, {"spec": {"version": "15.9"}})
        wait_for("upgraded", lambda: (s := status(kube, ns, name)).get("version") == "15.9"
                 and s.get("phase") == "Ready", timeout=600, interval=0.1)
        figures["upgrade"] = time.monotonic() - t0

    old = status(kube, ns, name)["currentPrimary"]
    kube.core.patch_namespaced_pod(old, ns, {"metadata": {"annotations": {"pod-delete.stage.kwok.x-k8s.io/delay": "60s"}}})
    t0 = time.monotonic()
    kube.core.delete_namespaced_pod(old, ns)
    # what a kubelet reports once the server has stopped (kwok's pods run nothing, so the bench says it)
    kube.core.patch_namespaced_pod_status(old, ns, {"status": {
        "conditions": [{"type": "Ready", "status": "False"}],
        "containerStatuses": [{"name": "postgres", "ready": False, "restartCount": 0, "image": "postgres", "imageID": "",
                               "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}]}})

    def promoted() -> bool:
        new = status(kube, ns, name).get("currentPrimary")
        if not new or new == old:
            return False
        return (kube.core.read_namespaced_pod(new, ns).metadata.labels or {}).get("sampledb.example.com/role") == "primary"

    wait_for("a new primary", promoted, timeout=300, interval=0.1)
    figures["failover"] = time.monotonic() - t0
    print(f"  {name}: " + ", ".join(f"{k} {v:.1f} s" for k, v in figures.items()), flush=True)
    return figures


def measure_databases(kube: Kube, runs: int, upgrade: bool = True) -> list[dict[str, float]]:
    """``runs`` databases one after another, by one operator in a namespace of their own."""
    install_sampledb_crds(kube)
    ns = fresh_namespace(kube, "bench-sdb")
    op = ours(kube, ns, watches_file(), "--ansible-roles-path", str(ROOT / "roles"))
    op.start(OURS_READY)
    try:
        return [one_database(kube, ns, f"db{i}", upgrade) for i in range(runs)]
    finally:
        # The databases go while the operator runs (their finalizer needs it), keeping nothing.
        for db in kube.custom.list_namespaced_custom_object(GROUP, VERSION, ns, PLURAL)["items"]:
            kube.custom.patch_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, db["metadata"]["name"],
                                                       {"spec": {"deletionPolicy": "Delete"}})
            kube.custom.delete_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, db["metadata"]["name"])
        wait_for("the databases to go", lambda: not kube.custom.list_namespaced_custom_object(
            GROUP, VERSION, ns, PLURAL)["items"], timeout=300)
        op.stop()
        delete_namespace(kube, ns)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.sampledb", description=__doc__)
    parser.add_argument("--runs", type=int, default=3, help="databases measured one after another")
    args = parser.parse_args(argv)
    runs = measure_databases(bench_cluster(), args.runs)
    rows = [[what, *(f"{stat([r[key] for r in runs]):.1f}" for stat in (median, min, max))]
            for what, key in [("create → Ready (3 servers)", "create"),
                              ("minor upgrade 15.8 → 15.9 → Ready (3 servers)", "upgrade"),
                              ("failover: primary pod deleted → new primary labelled", "failover")]]
    write_table("sampledb", [f"SampleDB, {args.runs} databases [s]", "median", "min", "max"], rows,
                role="the SampleDB operator (this repository's watches.yaml, playbook and roles), "
                     "failover_grace_seconds 0, fence_timeout_seconds 3")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
