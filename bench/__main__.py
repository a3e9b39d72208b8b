"""`python -m bench [scenario ...]`: runs benchmarks on the local control plane and prints their figures.

Scenarios: latency (create→Successful, no-op run p50/p95), burst (N CRs at once), failover (SIGTERM and
SIGKILL of the leader), dependents-memory (RSS with 5,000 unowned ConfigMaps vs none). With no argument,
all of them. Results are also written to bench/results/<date>-<scenario>.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import signal
import sys
import time
from pathlib import Path

from bench.harness import (
    HERE,
    StatusTracker,
    bench_cluster,
    create_benches,
    fresh_namespace,
    median,
    ours,
    patch_bench,
    pct,
)
from tests.kube import Kube, wait_for

RESULTS = HERE / "results"


def header() -> list[str]:
    import ansible
    import kopf

    return [f"date: {dt.datetime.now(dt.UTC).isoformat(timespec='seconds')}",
            f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
            f"versions: kopf {kopf.__version__ if hasattr(kopf, '__version__') else '?'}, ansible-core {ansible.__version__},"
            f" Kubernetes 1.34.4 (local control plane, kwok)"]


def report(name: str, rows: list[tuple[str, str]]) -> None:
    width = max(len(r[0]) for r in rows)
    lines = [f"## {name}", "", *header(), "", f"| {'measure'.ljust(width)} | value |", f"|{'-' * (width + 2)}|-------|"]
    lines += [f"| {k.ljust(width)} | {v} |" for k, v in rows]
    text = "\n".join(lines) + "\n"
    print(text, flush=True)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{dt.date.today().isoformat()}-{name}.md").write_text(text)


def watches(tmp: Path, period: str = "10h") -> Path:
    os.environ["BENCH_RECONCILE_PERIOD"] = period
    return HERE / "watches.yaml"


def latency(kube: Kube, executor: str, noops: int = 20) -> list[tuple[str, str]]:
    ns = fresh_namespace(kube, "bench-lat")
    op = ours(kube, ns, watches(Path()), executor=executor).start("operator ready")
    tracker = StatusTracker(kube, ns)
    tracker.start()
    try:
        creates = []
        for i in range(5):
            t0 = create_benches(kube, ns, [f"c{i}"])
            creates.append(tracker.wait_done([f"c{i}"], t0) - t0)
        noop = []
        for i in range(noops):
            t0 = patch_bench(kube, ns, "c0", {"ignored": i})
            noop.append(tracker.wait_done(["c0"], t0) - t0)
        return [(f"create → Successful, median of 5 ({executor})", f"{median(creates):.2f} s"),
                (f"no-op run p50 over {noops} spec changes ({executor})", f"{median(noop):.2f} s"),
                (f"no-op run p95 ({executor})", f"{pct(noop, 95):.2f} s"),
                (f"no-op run min / max ({executor})", f"{min(noop):.2f} / {max(noop):.2f} s")]
    finally:
        tracker.stop()
        op.stop()


def burst(kube: Kube, executor: str, n: int, workers: int | None = None) -> list[tuple[str, str]]:
    ns = fresh_namespace(kube, f"bench-burst{n}")
    args = ["--max-concurrent-reconciles", str(workers)] if workers else []
    op = ours(kube, ns, watches(Path()), *args, executor=executor).start("operator ready")
    tracker = StatusTracker(kube, ns)
    tracker.start()
    try:
        names = [f"b{i}" for i in range(n)]
        t0 = create_benches(kube, ns, names)
        created = tracker.wait_done(names, t0) - t0
        t1 = time.monotonic()
        for name in names:
            patch_bench(kube, ns, name, {"value": "changed"})
        changed = tracker.wait_done(names, t1) - t1
        label = f"{n} CRs ({executor}, {workers or os.cpu_count()} workers)"
        return [(f"{label}: all Successful", f"{created:.1f} s"), (f"{label}: spec change on all → done", f"{changed:.1f} s"),
                (f"{label}: operator RSS after", f"{op.rss_mb():.0f} MB")]
    finally:
        tracker.stop()
        op.stop()


def failover(kube: Kube) -> list[tuple[str, str]]:
    rows = []
    for sig in (signal.SIGTERM, signal.SIGKILL):
        ns = fresh_namespace(kube, "bench-ha")
        lock = f"bench-{sig.name.lower()}"
        args = ("--leader-elect", "--leader-election-id", lock, "--leader-election-namespace", ns)
        a = ours(kube, ns, watches(Path()), *args).start("operator ready")
        b = ours(kube, ns, watches(Path()), *args).start("waiting to become the leader")
        tracker = StatusTracker(kube, ns)
        tracker.start()
        try:
            t0 = time.monotonic()
            a.stop(sig)
            wait_for("the standby to lead", lambda b=b: "became the leader" in b.logs(), timeout=60)
            led = time.monotonic() - t0
            t1 = create_benches(kube, ns, ["after-failover"])
            done = tracker.wait_done(["after-failover"], t1) - t0
            rows += [(f"{sig.name} of the leader → standby leads (lease 15s/renew 10s/retry 2s)", f"{led:.1f} s"),
                     (f"{sig.name} of the leader → a CR created then is Successful", f"{done:.1f} s")]
        finally:
            tracker.stop()
            a.stop()
            b.stop()
    return rows


def dependents_memory(kube: Kube, count: int = 5000) -> list[tuple[str, str]]:
    ns = fresh_namespace(kube, "bench-mem")
    other = fresh_namespace(kube, "bench-unowned")
    op = ours(kube, None, watches(Path())).start("operator ready")  # cluster-wide: sees every ConfigMap
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
        # and the watch still works afterwards
        kube.core.delete_namespaced_config_map("owner-cm", ns)
        wait_for("the owned ConfigMap to return", lambda: kube.core.read_namespaced_config_map("owner-cm", ns),
                 timeout=60)
        return [("operator RSS (tree), ConfigMap dependents watched, no unowned ConfigMaps", f"{before:.0f} MB"),
                (f"operator RSS (tree), with {count} unowned ConfigMaps", f"{after:.0f} MB"),
                ("difference", f"{after - before:+.0f} MB")]
    finally:
        tracker.stop()
        op.stop()
        kube.core.delete_namespace(other)


SCENARIOS = ("latency", "burst", "failover", "dependents-memory")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("scenario", nargs="*", choices=[*SCENARIOS, []], default=[])
    parser.add_argument("--executor", action="append", choices=("warm", "cold"), default=None)
    parser.add_argument("--n", type=int, action="append", default=None, help="CRs for the burst (default 40 and 200)")
    args = parser.parse_args(argv)
    chosen = args.scenario or list(SCENARIOS)
    executors = args.executor or ["warm", "cold"]
    kube = bench_cluster()
    if "latency" in chosen:
        report("latency", [row for ex in executors for row in latency(kube, ex)])
    if "burst" in chosen:
        report("burst", [row for ex in executors for n in (args.n or [40, 200]) for row in burst(kube, ex, n)])
    if "failover" in chosen:
        report("failover", failover(kube))
    if "dependents-memory" in chosen:
        report("dependents-memory", dependents_memory(kube))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

