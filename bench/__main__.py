"""`python -m bench [scenario ...]`: benchmarks on the local control plane; prints tables, asserts nothing.

Scenarios:
  compare            the Go ansible-operator (built from ../shared/peers) and ours, one after the other, same
                     cluster, role, CRD and objects: create→Successful, no-op run p50/p95, N CRs at once, a spec
                     change on all N (N = 40 and 200, see --n)
  latency            ours only (warm and cold): create→Successful and no-op run latency
  failover           SIGTERM and SIGKILL of the leader: how soon the standby leads and converges a new CR
  dependents-memory  operator RSS with 5,000 unowned ConfigMaps vs none, ConfigMaps watched as dependents
  sweep              both: 40 CRs at once → all Successful at 1, 2, 4 and 8 workers (--max-concurrent-reconciles),
                     each one's best setting and the ratio best vs best
  idle-1000          both: 1,000 CRs converged (workers: --peer-workers / --ours-workers, else each one's best
                     in sweep when it ran first, else IDLE_WORKERS), then operator RSS while idle, and the API
                     server's write requests (benches, configmaps, events) during a resync of all 1,000 (ours:
                     two: the first after creation and the steady state; see IDLE_PASSES)
  goals              issue 14's table, each figure beside its goal: the SampleDB operator's steady-state run
                     (bench.profile --sampledb), create → Ready and failover (bench.sampledb), then for each
                     implementation: the one-task no-op run p50, 1,000 CRs at once, memory (RSS and PSS) with
                     them idle, and API writes per run of a resync (the peer's part takes about an hour)
With no scenario: all of them (`make bench`: several hours with the peer). Each table is also written to
bench/results/<date>-<scenario>.md.
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
    COMPONENT_EVENTS,
    HERE,
    OURS_READY,
    PEER_READY,
    PEER_VERSION,
    OperatorRun,
    StatusTracker,
    WriteKey,
    apiserver_writes,
    bench_cluster,
    create_benches,
    delete_namespace,
    fresh_namespace,
    median,
    ours,
    patch_bench,
    pct,
    peer,
    writes_between,
)
from tests.kube import Kube, wait_for

RESULTS = HERE / "results"
WATCHES = HERE / "watches.yaml"
Impl = tuple[str, Callable[..., OperatorRun], str]  # (label, factory(kube, namespace, *args, **kw), ready log line)
SWEEP_WORKERS = (1, 2, 4, 8)
# Worker counts for idle-1000 run on its own (without sweep first): each one's best in the sweep of
# bench/results/2026-11-22-sweep.md (2 cores, loaded by a concurrent test run).
IDLE_WORKERS: dict[str, int | None] = {"peer": 8, "ours": 8}
# Seconds per CR when converging many at once, to choose a reconcile period that starts the resync only
# after all are converged (that sweep's best, rounded up); a sweep in the same run replaces them.
PER_CR_ESTIMATE = {"peer": 2.1, "ours": 0.35, "ours-cold": 1.0}
BENCH_ROLE = "one kubernetes.core.k8s task applying a ConfigMap from the spec"


def impls(names: list[str]) -> list[Impl]:
    table: dict[str, Impl] = {
        "peer": (f"Go ansible-operator {PEER_VERSION}", lambda k, ns, *a, **kw: peer(k, ns, WATCHES, *a, **kw),
                 PEER_READY),
        "ours": ("playbook-operator (warm)", lambda k, ns, *a, **kw: ours(k, ns, WATCHES, *a, executor="warm", **kw),
                 OURS_READY),
        "ours-cold": ("playbook-operator (cold)",
                      lambda k, ns, *a, **kw: ours(k, ns, WATCHES, *a, executor="cold", **kw), OURS_READY),
    }
    return [table[n] for n in names]


def header(role: str) -> list[str]:
    import ansible

    return [f"date: {dt.datetime.now(dt.UTC).isoformat(timespec='seconds')}",
            f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
            f"versions: playbook-operator (this tree), ansible-core {ansible.__version__}; peer {PEER_VERSION} "
            f"(its own venv); Kubernetes 1.34.4 (local control plane, kwok)",
            f"role: {role}",
            # Timings depend on what else the machine runs; memory and write counts do not.
            "load average (1, 5, 15 min) when written: " + ", ".join(f"{x:.1f}" for x in os.getloadavg())]


def write_table(name: str, columns: list[str], rows: list[list[str]], notes: list[str] | None = None,
                role: str = BENCH_ROLE) -> None:
    widths = [max(len(str(r[i])) for r in [columns, *rows]) for i in range(len(columns))]
    fmt = "| " + " | ".join(f"{{:{w}}}" for w in widths) + " |"
    lines = [f"## {name}", "", *header(role), "", fmt.format(*columns),
             "|" + "|".join("-" * (w + 2) for w in widths) + "|", *[fmt.format(*r) for r in rows],
             *(["", *[f"- {note}" for note in notes]] if notes else [])]
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


def worker_args(workers: int | None) -> list[str]:
    return ["--max-concurrent-reconciles", str(workers)] if workers else []


def measure_burst(kube: Kube, impl: Impl, n: int, workers: int | None = None,
                  spec_change: bool = True) -> dict[str, float]:
    _, factory, ready = impl
    ns = fresh_namespace(kube, f"bench-burst{n}")
    op = factory(kube, ns, *worker_args(workers)).start(ready)
    tracker = StatusTracker(kube, ns)
    tracker.start()
    try:
        names = [f"b{i}" for i in range(n)]
        t0 = create_benches(kube, ns, names)
        created = tracker.wait_done(names, t0, timeout=1800) - t0
        w = workers or os.cpu_count()
        figures = {f"{n} CRs at once → all Successful ({w} workers) [s]": created}
        if spec_change:
            t1 = time.monotonic()
            for name in names:
                patch_bench(kube, ns, name, {"value": "changed"})
            figures[f"spec change on all {n} → all done ({w} workers) [s]"] = tracker.wait_done(names, t1,
                                                                                                timeout=1800) - t1
        figures[f"RSS after {n} CRs (operator + children) [MB]"] = op.rss_mb()
        return figures
    finally:
        tracker.stop()
        op.stop()
        delete_namespace(kube, ns)


def compare(kube: Kube, names: list[str], sizes: list[int], workers: int | None) -> None:
    chosen = impls(names)
    results: dict[str, dict[str, float]] = {label: {} for label, _, _ in chosen}
    for impl in chosen:
        print(f"# measuring {impl[0]} ...", flush=True)
        results[impl[0]].update(measure_latency(kube, impl))
        for n in sizes:
            results[impl[0]].update(measure_burst(kube, impl, n, workers))
    labels = [label for label, _, _ in chosen]
    write_table("compare", *side_by_side(labels, results))


def fmt(measure: str, value: float | None) -> str:
    if value is None:
        return "-"
    if measure.endswith("[MB]"):
        return f"{value:.0f}"
    return f"{value:.2f}" if measure.endswith("[s]") else f"{value:g}"


def side_by_side(labels: list[str], results: dict[str, dict[str, float]],
                 no_ratio: frozenset[str] = frozenset()) -> tuple[list[str], list[list[str]]]:
    """Columns and rows: one row per measure (in first-seen order), one column per implementation and,
    when the peer comes first, peer / ours (above 1: ours is faster, smaller or writes less) except for
    the settings in ``no_ratio``."""
    measures = list(dict.fromkeys(m for lab in labels for m in results[lab]))
    with_ratio = labels[0].startswith("Go") and len(labels) > 1
    rows = []
    for m in measures:
        values = [results[lab].get(m) for lab in labels]
        row = [m, *[fmt(m, v) for v in values]]
        if with_ratio:
            row.append(f"{values[0] / values[1]:.1f}x" if values[0] is not None and values[1] and m not in no_ratio
                       else "-")
        rows.append(row)
    return ["measure", *labels, *(["peer / ours"] if with_ratio else [])], rows


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
    res = {impl[0]: measure_latency(kube, impl) for impl in impls(["ours", "ours-cold"])}
    write_table("latency", *side_by_side(list(res), res))


def sweep(kube: Kube, names: list[str], n: int = 40,
          counts: tuple[int, ...] = SWEEP_WORKERS) -> dict[str, tuple[int, float]]:
    """N CRs at once at each worker count; returns each implementation's best (workers, seconds)."""
    chosen = dict(zip(names, impls(names), strict=True))
    times: dict[str, dict[int, float]] = {name: {} for name in names}
    for w in counts:  # implementations alternate at each setting, so that drifting load hits both alike
        for name, impl in chosen.items():
            print(f"# {impl[0]}: {n} CRs at {w} workers ...", flush=True)
            figures = measure_burst(kube, impl, n, w, spec_change=False)
            times[name][w] = next(iter(figures.values()))
    best = {name: min(t.items(), key=lambda wt: wt[1]) for name, t in times.items()}
    labels = [impl[0] for impl in chosen.values()]
    results = {impl[0]: {f"{n} CRs at once → all Successful, {w} workers [s]": times[name][w] for w in counts}
               for name, impl in chosen.items()}
    columns, rows = side_by_side(labels, results)
    best_row = [f"{n} CRs at once → all Successful, best setting of each [s]",
                *[f"{best[name][1]:.2f} ({best[name][0]} workers)" for name in names]]
    if len(columns) > len(best_row):
        best_row.append(f"{best[names[0]][1] / best[names[1]][1]:.1f}x")
    write_table("sweep", columns, [*rows, best_row], notes=[
        f"workers: --max-concurrent-reconciles (per kind, the same flag for both); one run per cell, in the "
        f"order {', '.join(f'{w}:' + '/'.join(names) for w in counts)}"])
    return best


WORKERS, PERIOD, RUNS = "workers (--max-concurrent-reconciles)", "reconcile period set [s]", "runs"
# Resync passes measured in idle-1000. Ours: the first after creation (whose runs report changed=0 where the
# creating run reported changed=1) and the second, the steady state; both must write nothing.
# The peer updates status twice in every run whatever the result (markRunning, markDone), so one pass
# of it (10 to 35 minutes for 1,000 on 2 cores) shows its steady state.
IDLE_PASSES = {"peer": 1, "ours": 2, "ours-cold": 2}


def idle_period(n: int, per_cr: float) -> float:
    """A reconcile period long enough that the first object's resync comes after the last one converged
    (so the operator is idle in between and the resync pass is a pass of its own). Generous: runs of
    1,000 queued objects were slower per object than those of 40 in the sweep."""
    return round(max(60.0, 1.5 * per_cr * n + 120))


def measure_idle(kube: Kube, impl: Impl, n: int, workers: int | None, period: float, passes: int = 1,
                 settle: float = 20, idle_window: float = 30,
                 max_pass: float | None = None) -> tuple[dict[str, float], list[str]]:
    """N CRs converged, then: RSS and API writes while idle; API writes during each of ``passes`` resyncs
    of all N (by resource, verb and code), each cut short after ``max_pass`` seconds if given (the
    writes per run still hold). Returns the figures and warnings."""
    _, factory, ready = impl
    ns = fresh_namespace(kube, f"bench-idle{n}")
    op = factory(kube, ns, *worker_args(workers), extra_env={"BENCH_RECONCILE_PERIOD": f"{period:.0f}s"})
    op.start(ready)
    tracker = StatusTracker(kube, ns)
    tracker.start()
    warnings = []
    try:
        names = [f"i{i}" for i in range(n)]
        t0 = create_benches(kube, ns, names)
        converged = tracker.wait_done(names, t0, timeout=max(1800, 3 * period)) - t0
        first_done = min(tracker.completion[name][1] for name in names) - t0
        time.sleep(settle)  # let the last status writes and the runtime settle
        before, idle_memory = apiserver_writes(kube), op.memory_mb()
        time.sleep(idle_window)
        after, runs_before = apiserver_writes(kube), op.reconciles()
        figures = {WORKERS: float(workers or os.cpu_count() or 1),
                   f"{n} CRs at once → all Successful [s]": converged,
                   f"RSS idle with {n} CRs (operator + children) [MB]": idle_memory["rss"],
                   f"PSS idle with {n} CRs (operator + children) [MB]": idle_memory["pss"],
                   f"API writes while idle for {idle_window:.0f} s": sum(writes_between(before, after).values()),
                   PERIOD: period}
        if runs_before > n or first_done + period < converged + settle + idle_window:
            warnings.append(f"{impl[0]}: resyncs began before the idle measure ended (converged after "
                            f"{converged:.0f} s, period {period:.0f} s): 'while idle' is not idle")
        for k in range(1, passes + 1):
            before = after
            timeout = period + 3 * converged + 600 if max_pass is None else period + max_pass
            started, finished, seen = resync_pass(op, runs_before, (k + 1) * n, timeout)
            if seen < (k + 1) * n:
                cut = f"{timeout:.0f} s" if max_pass is None else f"{max_pass:.0f} s (--idle-max-pass)"
                warnings.append(f"{impl[0]}: resync {k} cut short after {cut}")
            time.sleep(settle)  # a run's result is counted just before its status write
            after, runs = apiserver_writes(kube), op.reconciles()
            figures.update(pass_figures(k, n, runs - runs_before, finished - started, writes_between(before, after)))
            runs_before = runs
        figures["RSS after the last resync [MB]"] = op.rss_mb()
        return figures, warnings
    finally:
        tracker.stop()
        op.stop()
        delete_namespace(kube, ns)


def pass_figures(k: int, n: int, runs: float, seconds: float, writes: dict[WriteKey, float]) -> dict[str, float]:
    """Per run: the writes the operator can have made (not Kubernetes components' events.k8s.io Events, which
    are listed with the rest)."""
    ours = {key: v for key, v in writes.items() if not key[0].split(" ")[0].endswith(f".{COMPONENT_EVENTS}")}
    figures = {f"resync {k} of all {n}: {RUNS}": runs,
               f"resync {k} of all {n}: first run to last [s]": seconds,
               f"resync {k} of all {n}: API writes": sum(writes.values()),
               f"resync {k} of all {n}: API writes per run": sum(ours.values()) / runs if runs else 0.0}
    for (what, verb, code), count in sorted(writes.items()):
        figures[f"resync {k}: {verb} {what} (HTTP {code})"] = count
    return figures


def resync_pass(op: OperatorRun, runs_before: float, target: float,
                timeout: float) -> tuple[float, float, float]:
    """Waits until the operator has finished ``target`` reconciles in all (each object's first run plus
    its resync: the resync leaves the status as it is, so only the operator's own count shows it);
    returns when the first resync run and the last one were seen to finish (1 s resolution) and the
    count last seen; stops waiting after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    started = None
    while (runs := op.reconciles()) < target:
        if started is None and runs > runs_before:
            started = time.monotonic()
        if time.monotonic() > deadline:
            break
        time.sleep(1)
    finished = time.monotonic()
    return started or finished, finished, runs


def idle_row_order(measure: str) -> tuple[int, int]:
    """Idle measures first, then each resync's figures followed by its writes, then the final RSS (a
    stable sort keeps the order within each group)."""
    if measure.startswith("resync "):
        k = int(measure.split()[1].rstrip(":"))
        return k, 0 if " of all " in measure else 1
    return (1_000, 0) if measure.startswith("RSS after") else (0, 0)


def idle(kube: Kube, names: list[str], n: int, workers: dict[str, int | None], per_cr: dict[str, float],
         how_chosen: str, periods: dict[str, float], max_pass: float | None = None,
         passes: int | None = None) -> None:
    """Runs in the order of ``names``; the table has the peer first, as the other tables."""
    results: dict[str, dict[str, float]] = {}
    notes = []
    counts = {name: IDLE_PASSES[name] if passes is None else passes for name in names}
    for name, impl in zip(names, impls(names), strict=True):
        resync = periods.get(name) or idle_period(n, per_cr[name])
        print(f"# {impl[0]}: {n} CRs at {workers[name] or 'default'} workers, then {counts[name]} "
              f"resync(s) (period {resync:.0f} s) ...", flush=True)
        results[impl[0]], warnings = measure_idle(kube, impl, n, workers[name], resync, counts[name],
                                                  max_pass=max_pass)
        notes += warnings
    labels = [impl[0] for impl in impls(sorted(names, key=["peer", "ours", "ours-cold"].index))]
    no_ratio = frozenset({WORKERS, PERIOD, *(m for r in results.values() for m in r if m.endswith(RUNS))})
    columns, rows = side_by_side(labels, results, no_ratio)
    rows.sort(key=lambda row: idle_row_order(row[0]))
    # One implementation alone (run on another cluster meanwhile, say) gets a file of its own.
    write_table(f"idle-{n}" + ("" if len(names) > 1 else f"-{names[0]}"), columns, rows, notes=[
        f"workers: {how_chosen}",
        "API writes: the API server's apiserver_request_total (from its /metrics, admin credentials), verbs "
        "POST, PUT, PATCH, APPLY, DELETE, DELETECOLLECTION, any HTTP code, resources benches (any "
        "subresource), configmaps and events (core and events.k8s.io): everything the bench role and an "
        "operator write for it; Leases and the control plane's own objects are left out. A resync's window "
        "runs from the end of the previous measure until the operator's ansible_operator_reconcile_result "
        "count shows one more run of every object, plus 20 s.",
        "Resyncs measured: " + ", ".join(f"{name} {counts[name]}" for name in names) + " (ours: the first "
        "after creation, whose runs report changed=0 where the creating runs reported 1, and the steady state; the peer "
        "writes status twice on every run whatever the result).",
        *notes])


# issue 14's figures and their goals; the peer is measured for those where it applies
STEADY, CREATE, FAILOVER = ("SampleDB steady-state run (nothing changes) [s]", "SampleDB create → Ready, 3 servers [s]",
                            "SampleDB failover: primary pod deleted → new primary in status [s]")
NOOP, BURST, RSS, PSS, WRITES = ("one-task no-op run p50 [s]", "1000 CRs at once → all Successful [s]",
                                 "operator memory with 1000 idle CRs, RSS [MB]",
                                 "operator memory with 1000 idle CRs, PSS [MB]", "API writes per run of an idle resync")
GOALS = {STEADY: "≤ 1.0", CREATE: "≤ 6", FAILOVER: "≤ 3", NOOP: "≤ 0.25", BURST: "≤ 120", RSS: "≤ 120",
         PSS: "≤ 120", WRITES: "0"}


# The resyncs goals measures: ours one (it writes nothing from the first); the peer's resync of 1,000 takes as
# long again as their creation (about 20 minutes here), and it writes the same on every run: idle-1000 has it.
GOALS_PASSES = {"peer": 0, "ours": 1, "ours-cold": 1}


def goals(kube: Kube, names: list[str], workers: dict[str, int | None], periods: dict[str, float],
          profile_runs: int = 8, databases: int = 3) -> None:
    from bench.profile_sampledb import profile_sampledb
    from bench.sampledb import measure_databases

    labels = [impl[0] for impl in impls(names)]
    results: dict[str, dict[str, float]] = {label: {} for label in labels}
    ours_label = impls(["ours"])[0][0]
    if ours_label in results:
        steady, tasks = profile_sampledb(kube, profile_runs)
        dbs = measure_databases(kube, databases, upgrade=False)
        results[ours_label].update({STEADY: steady, CREATE: median([d["create"] for d in dbs]),
                                    FAILOVER: median([d["failover"] for d in dbs])})
    notes = []
    for name, impl in zip(names, impls(names), strict=True):
        print(f"# {impl[0]} ...", flush=True)
        latency = measure_latency(kube, impl, creates=1)
        idle, warnings = measure_idle(kube, impl, 1000, workers[name], periods[name], passes=GOALS_PASSES[name])
        notes += warnings
        results[impl[0]].update({
            NOOP: next(v for k, v in latency.items() if k.startswith("no-op run p50")),
            BURST: idle["1000 CRs at once → all Successful [s]"],
            RSS: idle["RSS idle with 1000 CRs (operator + children) [MB]"],
            PSS: idle["PSS idle with 1000 CRs (operator + children) [MB]"],
            **({WRITES: idle["resync 1 of all 1000: API writes per run"]} if GOALS_PASSES[name] else {})})
        writes = ", ".join(f"{k.split(': ', 1)[1]} {v:g}" for k, v in idle.items() if k.startswith("resync 1: "))
        notes.append(f"{impl[0]}: {workers[name] or 'default'} workers for the 1000 CRs, reconcile period "
                     f"{periods[name]:.0f} s" + (f"; the resync's writes: {writes}" if writes else ""))
    columns, rows = side_by_side(labels, results)
    for row in rows:
        row.append(GOALS[row[0]])
    write_table("goals", [*columns, "goal"], rows, role="see each row", notes=[
        *(["SampleDB (ours only; kwok, 3 servers): the steady-state run is the median of "
           f"{profile_runs} runs of bench.profile --sampledb ({tasks} tasks a run); create and failover the "
           f"medians of {databases} databases of bench.sampledb (failover_grace_seconds 0)"]
          if ours_label in results else []),
        "the one-task rows: the bench role (one kubernetes.core.k8s task applying a ConfigMap); no-op p50 of 20 "
        "spec changes; memory of the operator's process tree once the 1000 are converged and idle",
        *(["the peer's API writes per resync run: not measured here (GOALS_PASSES), see idle-1000"]
          if "peer" in names else []),
        *notes])


SCENARIOS = ("compare", "sweep", "idle-1000", "latency", "failover", "dependents-memory", "goals")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("scenario", nargs="*", help=f"any of {', '.join(SCENARIOS)} (default: all)")
    parser.add_argument("--impl", action="append", choices=("peer", "ours", "ours-cold"),
                        help="implementations for compare, sweep and idle-1000, in column order (default: peer, ours)")
    parser.add_argument("--n", type=int, action="append", help="CRs at once for compare (default: 40 and 200)")
    parser.add_argument("--workers", type=int, help="--max-concurrent-reconciles for both in compare "
                        "(default: each one's own)")
    parser.add_argument("--peer-workers", type=int, help="the peer's workers in idle-1000 (default: its best "
                        f"in sweep when sweep runs too, else {IDLE_WORKERS['peer']})")
    parser.add_argument("--ours-workers", type=int, help="our workers in idle-1000 (default: the best in sweep "
                        "when sweep runs too, else our own default)")
    parser.add_argument("--idle-n", type=int, default=1000, help="CRs in idle-1000 (default: %(default)s)")
    parser.add_argument("--idle-period", action="append", default=[], metavar="[IMPL=]SECONDS",
                        help="reconcile period in idle-1000, for all or one implementation (default: long enough "
                        "that the resync starts after all are converged)")
    parser.add_argument("--idle-max-pass", type=float, help="stop counting a resync in idle-1000 after this many "
                        "seconds (the writes per run still hold; default: wait for every object)")
    parser.add_argument("--idle-passes", type=int, help="resyncs to measure in idle-1000 (default: IDLE_PASSES; "
                        "0: only the idle measure)")
    args = parser.parse_args(argv)
    unknown = set(args.scenario) - set(SCENARIOS)
    if unknown:
        parser.error(f"unknown scenario(s) {sorted(unknown)}; choose from {', '.join(SCENARIOS)}")
    chosen = args.scenario or list(SCENARIOS)
    kube = bench_cluster()
    names = args.impl or ["peer", "ours"]
    periods = {n: float(v) for n, v in (p.split("=", 1) if "=" in p else (n, p)
                                         for p in args.idle_period for n in names)}
    if "compare" in chosen:
        compare(kube, names, args.n or [40, 200], args.workers)
    best = sweep(kube, names) if "sweep" in chosen else {}
    # idle-1000's and goals' worker counts and per-CR estimates: given, else the sweep's best, else presets
    given = {"peer": args.peer_workers, "ours": args.ours_workers}
    workers = {n: given.get(n) or (best[n][0] if n in best else IDLE_WORKERS.get(n)) for n in names}
    per_cr = {n: best[n][1] / 40 if n in best else PER_CR_ESTIMATE[n] for n in names}
    if "idle-1000" in chosen:
        how = ", ".join(f"{n} {workers[n] or 'its default'}"
                        f" ({'given' if given.get(n) else 'best in the sweep' if n in best else 'preset'})"
                        for n in names)
        idle(kube, names, args.idle_n, workers, per_cr, how, periods, args.idle_max_pass, args.idle_passes)
    if "goals" in chosen:
        goals(kube, names, workers, {n: periods.get(n) or idle_period(1000, per_cr[n]) for n in names})
    if "latency" in chosen:
        latency(kube)
    if "failover" in chosen:
        failover(kube)
    if "dependents-memory" in chosen:
        dependents_memory(kube)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
