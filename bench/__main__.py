"""`python -m bench [scenario ...]`: benchmarks on the local control plane; prints tables, asserts nothing.

Scenarios:
  compare            the Go ansible-operator (built from ../shared/peers) and ours, one after the other, same
                     cluster, role, CRD and objects: create→Successful, no-op run p50/p95, N CRs at once, a spec
                     change on all N (N = 40 and 200, see --n)
  latency            ours only (warm and cold): create→Successful and no-op run latency
  failover           SIGTERM and SIGKILL of the leader: how soon the standby leads and converges a new CR
  dependents-memory  operator RSS with 5,000 unowned ConfigMaps vs none, ConfigMaps watched as dependents
With no scenario: all of them. Each table is also written to bench/results/<date>-<scenario>.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import signal
import sys
import time
from collections.abc import Callable

from bench.harness import (
    HERE,
    OURS_READY,
    PEER_READY,
    PEER_VERSION,
    OperatorRun,
    StatusTracker,
    bench_cluster,
    create_benches,
    fresh_namespace,
    median,
    ours,
    patch_bench,
    pct,
    peer,
)
from tests.kube import Kube, wait_for

RESULTS = HERE / "results"
WATCHES = HERE / "watches.yaml"
Impl = tuple[str, Callable[..., OperatorRun], str]  # (label, factory(kube, namespace, *args), ready log line)


def impls(names: list[str]) -> list[Impl]:
    table: dict[str, Impl] = {
        "peer": (f"Go ansible-operator {PEER_VERSION}", lambda k, ns, *a: peer(k, ns, WATCHES, *a), PEER_READY),
        "ours": ("playbook-operator (warm)", lambda k, ns, *a: ours(k, ns, WATCHES, *a, executor="warm"), OURS_READY),
        "ours-cold": ("playbook-operator (cold)", lambda k, ns, *a: ours(k, ns, WATCHES, *a, executor="cold"),
                      OURS_READY),
    }
    return [table[n] for n in names]


def header() -> list[str]:
    import ansible

    return [f"date: {dt.datetime.now(dt.UTC).isoformat(timespec='seconds')}",
            f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
            f"versions: playbook-operator (this tree), ansible-core {ansible.__version__}; peer {PEER_VERSION} "
            f"(its own venv); Kubernetes 1.34.4 (local control plane, kwok)",
            "role: one kubernetes.core.k8s task applying a ConfigMap from the spec"]


def write_table(name: str, columns: list[str], rows: list[list[str]]) -> None:
    widths = [max(len(str(r[i])) for r in [columns, *rows]) for i in range(len(columns))]
    fmt = "| " + " | ".join(f"{{:{w}}}" for w in widths) + " |"
    lines = [f"## {name}", "", *header(), "", fmt.format(*columns),
             "|" + "|".join("-" * (w + 2) for w in widths) + "|", *[fmt.format(*r) for r in rows]]
    text = "\n".join(lines) + "\n"
    print(text, flush=True)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{dt.date.today().isoformat()}-{name}.md").write_text(text)


def measure_latency(kube: Kube, impl: Impl, noops: int = 20, creates: int = 5) -> dict[str, float]:
    _, factory, ready = impl
    ns = fresh_namespace(kube, "bench-lat")
    op = factory(kube, ns).start(ready)
    tracker = StatusTracker(kube, ns)
    tracker.start()
    try:
        created = []
        for i in range(creates):
            t0 = create_benches(kube, ns, [f"c{i}"])
            created.append(tracker.wait_done([f"c{i}"], t0) - t0)
        noop = []
        for i in range(noops):
            t0 = patch_bench(kube, ns, "c0", {"ignored": i})
            noop.append(tracker.wait_done(["c0"], t0) - t0)
        return {f"create → Successful, 1 CR (median of {creates}) [s]": median(created),
                f"no-op run p50 ({noops} spec changes) [s]": median(noop),
                f"no-op run p95 ({noops} spec changes) [s]": pct(noop, 95)}
    finally:
        tracker.stop()
        op.stop()


def measure_burst(kube: Kube, impl: Impl, n: int, workers: int | None = None) -> dict[str, float]:
    _, factory, ready = impl
    ns = fresh_namespace(kube, f"bench-burst{n}")
    args = ["--max-concurrent-reconciles", str(workers)] if workers else []
    op = factory(kube, ns, *args).start(ready)
    tracker = StatusTracker(kube, ns)
    tracker.start()
    try:
        names = [f"b{i}" for i in range(n)]
        t0 = create_benches(kube, ns, names)
        created = tracker.wait_done(names, t0, timeout=1800) - t0
        t1 = time.monotonic()
        for name in names:
            patch_bench(kube, ns, name, {"value": "changed"})
        changed = tracker.wait_done(names, t1, timeout=1800) - t1
        w = workers or os.cpu_count()
        return {f"{n} CRs at once → all Successful ({w} workers) [s]": created,
                f"spec change on all {n} → all done ({w} workers) [s]": changed,
                f"RSS after {n} CRs (operator + children) [MB]": op.rss_mb()}
    finally:
        tracker.stop()
        op.stop()
        kube.core.delete_namespace(ns)


def compare(kube: Kube, names: list[str], sizes: list[int], workers: int | None) -> None:
    chosen = impls(names)
    results: dict[str, dict[str, float]] = {label: {} for label, _, _ in chosen}
    for impl in chosen:
        print(f"# measuring {impl[0]} ...", flush=True)
        results[impl[0]].update(measure_latency(kube, impl))
        for n in sizes:
            results[impl[0]].update(measure_burst(kube, impl, n, workers))
    labels = [label for label, _, _ in chosen]
    measures = list(results[labels[0]])
    rows = []
    for m in measures:
        values = [results[lab].get(m) for lab in labels]
        row = [m, *[f"{v:.2f}" if v is not None else "-" for v in values]]
        if labels[0].startswith("Go") and len(labels) > 1 and values[0] and values[1]:
            row.append(f"{values[0] / values[1]:.1f}x")
        rows.append(row)
    ratio = ["peer / ours"] if labels[0].startswith("Go") and len(labels) > 1 else []
    write_table("compare", ["measure", *labels, *ratio], rows)


def failover(kube: Kube) -> None:
    rows = []
    for sig in (signal.SIGTERM, signal.SIGKILL):
        ns = fresh_namespace(kube, "bench-ha")
        args = ("--leader-elect", "--leader-election-id", f"bench-{sig.name.lower()}", "--leader-election-namespace", ns)
        a = ours(kube, ns, WATCHES, *args).start(OURS_READY)
        b = ours(kube, ns, WATCHES, *args).start("waiting to become the leader")
        tracker = StatusTracker(kube, ns)
        tracker.start()
        try:
            t0 = time.monotonic()
            a.stop(sig)
            wait_for("the standby to lead", lambda b=b: "became the leader" in b.logs(), timeout=60)
            led = time.monotonic() - t0
            t1 = create_benches(kube, ns, ["after-failover"])
            done = tracker.wait_done(["after-failover"], t1) - t0
            rows += [[f"{sig.name} of the leader → the standby leads", f"{led:.1f}"],
                     [f"{sig.name} of the leader → a CR created then is Successful", f"{done:.1f}"]]
        finally:
            tracker.stop()
            a.stop()
            b.stop()
    write_table("failover", ["measure (lease 15s, renew deadline 10s, retry 2s)", "seconds"], rows)


def dependents_memory(kube: Kube, count: int = 5000) -> None:
    ns = fresh_namespace(kube, "bench-mem")
    other = fresh_namespace(kube, "bench-unowned")
    op = ours(kube, None, WATCHES).start(OURS_READY)  # cluster-wide: it sees every ConfigMap
    tracker = StatusTracker(kube, ns)
    tracker.start()
    try:
        t0 = create_benches(kube, ns, ["owner"])
        tracker.wait_done(["owner"], t0)
        wait_for("the ConfigMap dependent watch", lambda: "as a dependent kind" in op.logs())
        time.sleep(5)
        before = op.rss_mb()
        for i in range(count):
            kube.core.create_namespaced_config_map(other, {"metadata": {"name": f"unowned-{i}"},
                                                          "data": {"payload": "x" * 200}})
        time.sleep(15)
        after = op.rss_mb()
        kube.core.delete_namespaced_config_map("owner-cm", ns)  # and the watch still works
        wait_for("the owned ConfigMap to return", lambda: kube.core.read_namespaced_config_map("owner-cm", ns),
                 timeout=60)
        write_table("dependents-memory", ["operator RSS (process tree), ConfigMaps watched as dependents", "MB"], [
            ["no unowned ConfigMaps", f"{before:.0f}"], [f"{count} unowned ConfigMaps", f"{after:.0f}"],
            ["difference", f"{after - before:+.0f}"]])
    finally:
        tracker.stop()
        op.stop()
        kube.core.delete_namespace(other)


def latency(kube: Kube) -> None:
    chosen = impls(["ours", "ours-cold"])
    res = {impl[0]: measure_latency(kube, impl) for impl in chosen}
    labels = list(res)
    write_table("latency", ["measure", *labels], [[m, *[f"{res[lab][m]:.2f}" for lab in labels]] for m in res[labels[0]]])


SCENARIOS = ("compare", "latency", "failover", "dependents-memory")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("scenario", nargs="*", help=f"any of {', '.join(SCENARIOS)} (default: all)")
    parser.add_argument("--impl", action="append", choices=("peer", "ours", "ours-cold"),
                        help="implementations for compare, in column order (default: peer, ours)")
    parser.add_argument("--n", type=int, action="append", help="CRs at once for compare (default: 40 and 200)")
    parser.add_argument("--workers", type=int, help="--max-concurrent-reconciles for both (default: each one's own)")
    args = parser.parse_args(argv)
    unknown = set(args.scenario) - set(SCENARIOS)
    if unknown:
        parser.error(f"unknown scenario(s) {sorted(unknown)}; choose from {', '.join(SCENARIOS)}")
    chosen = args.scenario or list(SCENARIOS)
    os.environ.setdefault("BENCH_RECONCILE_PERIOD", "10h")
    kube = bench_cluster()
    if "compare" in chosen:
        compare(kube, args.impl or ["peer", "ours"], args.n or [40, 200], args.workers)
    if "latency" in chosen:
        latency(kube)
    if "failover" in chosen:
        failover(kube)
    if "dependents-memory" in chosen:
        dependents_memory(kube)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
