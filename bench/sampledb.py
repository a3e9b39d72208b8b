"""`python -m bench.sampledb`: the SampleDB operator's own figures on the local control plane, for 3-server
databases: create → Ready, a minor upgrade (15.8 → 15.9, replicas first, primary last) → Ready on the new
version, and failover (the primary's pod deleted → another pod labelled primary and in status).

kwok's stage delays are set to 0 for the database pods and Jobs (kwok's defaults are arbitrary simulated
delays), and failover_grace_seconds to 0: in production a failover also waits that grace (10 s by default)
before promoting. Prints a table and writes it to bench/results/<date>-sampledb.md."""

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
    path.write_text(yaml.safe_dump(sampledb_watches(failover_grace_seconds=0)))
    return path


def status(kube: Kube, ns: str, name: str) -> dict:
    return get(kube, ns, name).get("status") or {}


def one_database(kube: Kube, ns: str, name: str) -> dict[str, float]:
    doc = sample(name, version="15.8")  # kwok: the version names images, 15.9 is the minor upgrade
    t0 = time.monotonic()
    kube.custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, doc)
    wait_for("Ready", lambda: status(kube, ns, name).get("phase") == "Ready", timeout=300, interval=0.1)
    created = time.monotonic() - t0

    t0 = time.monotonic()
    kube.custom.patch_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, name, {"spec": {"version": "15.9"}})
    wait_for("upgraded", lambda: (s := status(kube, ns, name)).get("version") == "15.9" and s.get("phase") == "Ready",
             timeout=600, interval=0.1)
    upgraded = time.monotonic() - t0

    old = status(kube, ns, name)["currentPrimary"]
    kube.core.patch_namespaced_pod(old, ns, {"metadata": {"annotations": {"pod-delete.stage.kwok.x-k8s.io/delay": "60s"}}})
    t0 = time.monotonic()
    kube.core.delete_namespaced_pod(old, ns)

    def promoted() -> bool:
        new = status(kube, ns, name).get("currentPrimary")
        if not new or new == old:
            return False
        return (kube.core.read_namespaced_pod(new, ns).metadata.labels or {}).get("sampledb.example.com/role") == "primary"

    wait_for("a new primary", promoted, timeout=300, interval=0.1)
    failed_over = time.monotonic() - t0
    print(f"  {name}: create→Ready {created:.1f} s, upgrade {upgraded:.1f} s, failover {failed_over:.1f} s", flush=True)
    return {"create": created, "upgrade": upgraded, "failover": failed_over}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.sampledb", description=__doc__)
    parser.add_argument("--runs", type=int, default=3, help="databases measured one after another")
    args = parser.parse_args(argv)
    kube = bench_cluster()
    install_sampledb_crds(kube)
    ns = fresh_namespace(kube, "bench-sdb")
    op = ours(kube, ns, watches_file(), "--ansible-roles-path", str(ROOT / "roles"))
    op.start(OURS_READY)
    try:
        runs = [one_database(kube, ns, f"db{i}") for i in range(args.runs)]
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
    rows = [[what, *(f"{stat([r[key] for r in runs]):.1f}" for stat in (median, min, max))]
            for what, key in [("create → Ready (3 servers)", "create"),
                              ("minor upgrade 15.8 → 15.9 → Ready (3 servers)", "upgrade"),
                              ("failover: primary pod deleted → new primary labelled", "failover")]]
    write_table("sampledb", [f"SampleDB, {args.runs} databases [s]", "median", "min", "max"], rows,
                role="the SampleDB operator (this repository's watches.yaml, playbook and roles), failover_grace_seconds 0")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
