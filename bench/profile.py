"""`python -m bench.profile`: where one run of the bench role spends its time, cold and warm.

Each executor runs the bench role (one kubernetes.core.k8s task applying a ConfigMap) for one Bench object,
one run after another, outside any operator (no queue, no proxy, no status write): what is left is the
cost of a run itself. The phases come from the run's own job events (their `created` times, written by
ansible-runner's callback in the run's process) against the time the run was asked for:

- to the playbook's start: process start-up, Python imports, the CLI, inventory and playbook loading;
- play set-up: from the playbook's start to the task's start on the host (variables, role compile,
  strategy, the task worker);
- the task: the kubernetes.core.k8s call (its module process, imports, and the API round trips);
- to the stats: from the task's result to the play's end;
- after the stats: process exit and reading the events back.

It also times a fresh interpreter importing what every cold run and every cold module call imports.
Prints a table and writes it to bench/results/<date>-profile.md."""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.__main__ import WATCHES, write_table
from bench.harness import (
    GROUP,
    HERE,
    PLURAL,
    VERSION,
    bench_cluster,
    create_benches,
    delete_namespace,
    fresh_namespace,
    median,
    operator_env,
)
from runner.config import RunConfig, load_watches
from runner.execution import RunRequest
from runner.manager import make_executor, write_playbooks
from runner.params import build_extravars
from tests.kube import Kube

PHASES = ("to the playbook's start", "play set-up", "the kubernetes.core.k8s task", "to the stats",
          "after the stats")
TOTAL = "whole run"
IMPORTS = {
    "a fresh python: start-up alone": "pass",
    "a fresh python: import ansible-playbook's CLI": "import ansible.cli.playbook",
    "a fresh python: import the kubernetes client (as kubernetes.core does)": "import kubernetes.dynamic",
}


def _at(event: dict[str, Any]) -> float:
    """A job event's time: ansible-runner writes `created` in UTC, without a zone."""
    return dt.datetime.fromisoformat(event["created"]).replace(tzinfo=dt.UTC).timestamp()


def phases(asked: float, returned: float, events: list[dict[str, Any]]) -> dict[str, float]:
    """One run's phases, in seconds, from its job events; the run must have had exactly one task."""
    first = {}
    for e in events:
        first.setdefault(e.get("event"), _at(e))
    marks = [asked, first["playbook_on_start"], first["runner_on_start"], first["runner_on_ok"],
             first["playbook_on_stats"], returned]
    return {**{name: b - a for name, a, b in zip(PHASES, marks[:-1], marks[1:], strict=True)}, TOTAL: returned - asked}


async def profile_executor(name: str, obj: dict[str, Any], runs: int, workdir: Path) -> list[dict[str, float]]:
    (watch,) = load_watches(WATCHES)
    extravars = build_extravars(watch, obj, False)
    kubeconfig = os.environ["KUBECONFIG"]
    playbook = write_playbooks(watch, workdir / "playbooks")["main"]
    executor = make_executor(RunConfig(watches_file=WATCHES, executor=name), 1)
    await executor.start()
    try:
        out = []
        for i in range(runs):
            request = RunRequest(ident=f"{name}-{i}", private_data_dir=workdir / name, playbook=playbook,
                                 extravars=extravars,
                                 env={"K8S_AUTH_KUBECONFIG": kubeconfig, "KUBECONFIG": kubeconfig}, keep_artifacts=1)
            asked = time.time()
            result = await executor.run(request)
            returned = time.time()
            if result.rc != 0:
                raise SystemExit(f"{name} run {i} failed: {result.outcome}")
            out.append(phases(asked, returned, result.events))
        return out
    finally:
        await executor.stop()


def one_executor(name: str, kube: Kube, obj: dict[str, Any], runs: int) -> list[dict[str, float]]:
    """Runs in a process of its own: the warm executor sets Ansible's configuration in its process's
    environment and leaves a forkserver behind, which must not reach the caller (a test worker, say). Its
    environment is an operator's (the cluster's KUBECONFIG, watches.yaml's reconcile period)."""
    with tempfile.TemporaryDirectory(prefix=f"bench-profile-{name}-") as tmp:
        io = Path(tmp)
        (io / "object.json").write_text(json.dumps(obj))
        # `-c`, not `-m bench.profile`: multiprocessing's children re-import the parent's main module by
        # name, and this one imports kopf and the harness, which would be timed as part of every warm run.
        subprocess.run([sys.executable, "-c", "import sys; from bench.profile import main; sys.exit(main(sys.argv[1:]))",
                        "--one", name, "--runs", str(runs), "--io", tmp],
                       env=operator_env(kube, None, None), check=True, cwd=HERE.parent)
        return json.loads((io / "phases.json").read_text())


def import_times(runs: int) -> dict[str, float]:
    def once(code: str) -> float:
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True)
        return time.perf_counter() - t0

    return {what: median([once(code) for _ in range(runs)]) for what, code in IMPORTS.items()}


def profile(kube: Kube, runs: int) -> tuple[dict[str, dict[str, float]], dict[str, float]]:
    """Median phases per executor, and the fresh-interpreter import times."""
    ns = fresh_namespace(kube, "bench-profile")
    try:
        create_benches(kube, ns, ["p0"])
        obj = kube.custom.get_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "p0")
        medians = {}
        for name in ("cold", "warm"):
            per_run = one_executor(name, kube, obj, runs)
            # The first run of each pays one-off costs (the forkserver's first fork, disk caches).
            steady = per_run[1:] or per_run
            medians[name] = {k: median([r[k] for r in steady]) for k in (*PHASES, TOTAL)}
        return medians, import_times(max(3, runs // 3))
    finally:
        delete_namespace(kube, ns)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.profile", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=11, help="runs per executor (the first is left out)")
    parser.add_argument("--sampledb", action="store_true", help="profile the SampleDB operator's steady-state run "
                        "instead (bench/profile_sampledb.py)")
    parser.add_argument("--one", choices=("cold", "warm"), help=argparse.SUPPRESS)  # one_executor's child
    parser.add_argument("--io", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        obj = json.loads((args.io / "object.json").read_text())
        per_run = asyncio.run(profile_executor(args.one, obj, args.runs, args.io))
        (args.io / "phases.json").write_text(json.dumps(per_run))
        return 0
    if args.sampledb:
        from bench.profile_sampledb import profile_sampledb

        profile_sampledb(bench_cluster(), args.runs)
        return 0
    medians, imports = profile(bench_cluster(), args.runs)
    rows = [[phase, f"{medians['cold'][phase]:.3f}", f"{medians['warm'][phase]:.3f}",
             f"{medians['cold'][phase] - medians['warm'][phase]:+.3f}"] for phase in (*PHASES, TOTAL)]
    rows += [[what, f"{seconds:.3f}", "-", "-"] for what, seconds in imports.items()]
    write_table("profile", ["one run of the bench role, median [s]", "cold", "warm", "saved by warm"], rows, notes=[
        f"{args.runs} runs per executor one after another, the first left out; no operator: the executor alone "
        "(no queue, proxy or status write), with the cluster's admin kubeconfig",
        "phases from the run's job events (their `created` times) against the time the run was asked for: "
        + "; ".join(PHASES),
        "the fresh-python rows: `python -c ...` wall time; cold runs pay the CLI import once per run and the "
        "kubernetes import once per kubernetes.core task, in a new interpreter; warm runs pay neither"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
