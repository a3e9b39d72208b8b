"""`python -m bench.profile --sampledb`: where a SampleDB reconcile in which nothing changes spends its time.

The SampleDB operator (this repository's watches.yaml and roles, the warm executor) runs against a Ready
3-server database on the local control plane; each run is started by touching an annotation (watched for
SampleDB), one after another, the first after start-up left out (it builds the module payloads). From
each run's job events (their `created` times):

- per phase: Ansible's own start (to the first task), then per kind of task the time from a task's start
  to its result (a module's task in a forked task worker; set_fact, debug, assert and skipped tasks in the
  run's own process), the controller's time between tasks, and the rest of the run's time (outside the
  playbook's events: the run's fork, Ansible's command line, loading the playbook and its roles);
- per task: the slowest, median over the runs;
- the task counts by role: ok and skipped.

The whole run is what the operator logs (`run end: ... in X s`), so it includes the executor's own cost.
Prints the tables and writes them to bench/results/<date>-profile-sampledb.md."""

from __future__ import annotations

import collections
import re
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.__main__ import write_table
from bench.harness import delete_namespace, fresh_namespace, median
from bench.profile import _at
from runner.execution.base import read_events
from tests.kube import Kube, wait_for
from tests.operator import ROOT, OperatorProcess, install_sampledb_crds, sampledb_watches
from tests.sampledb import GROUP, PLURAL, VERSION, gone, sample, wait_phase

NAME = "db"
START, BETWEEN = "Ansible's start (to the first task)", "the controller between tasks"
OUTSIDE = "outside the playbook's events (the run's fork, Ansible's command line, the playbook and roles loaded, the events read)"
RESULT_EVENTS = ("runner_on_ok", "runner_on_skipped", "runner_on_failed")


class Run:
    """One run's breakdown from its job events."""

    def __init__(self, seconds: float, events: list[dict[str, Any]]) -> None:
        self.seconds = seconds
        self.phases: dict[str, float] = collections.Counter()
        self.counts: dict[str, int] = collections.Counter()
        self.tasks: dict[str, float] = {}
        self.outcomes: list[tuple[str, str]] = []  # (role, ok|skipped) per task
        events = sorted((e for e in events if "created" in e), key=lambda e: (_at(e), e.get("counter", 0)))
        current: dict[str, Any] | None = None
        last_result: float | None = None
        for e in events:
            data = e.get("event_data") or {}
            if e["event"] == "playbook_on_task_start":
                self.phases[START if last_result is None else BETWEEN] += _at(e) - (last_result or _at(events[0]))
                current = {"at": _at(e), "action": (data.get("task_action") or "").split(".")[-1]}
            elif e["event"] in RESULT_EVENTS and current is not None:
                outcome = "skipped" if e["event"] == "runner_on_skipped" else "ok"
                phase = f"a task: {'skipped' if outcome == 'skipped' else current['action']}"
                self.phases[phase] += _at(e) - current["at"]
                self.counts[phase] += 1
                self.tasks[f"{data.get('role', '')}: {data.get('task', '')}"] = _at(e) - current["at"]
                self.outcomes.append((data.get("role", ""), outcome))
                last_result, current = _at(e), None
        if events:
            self.phases[OUTSIDE] = max(0.0, seconds - (_at(events[-1]) - _at(events[0])))


def latest_run_events(op: OperatorProcess) -> list[dict[str, Any]]:
    """The events of the newest run that has ended (it wrote its status)."""
    ended = op.artifacts.glob(f"sampledb.example.com/*/SampleDB/*/{NAME}/artifacts/*/status")
    events = read_events(max(ended, key=lambda p: p.stat().st_mtime).parent)
    if not events:
        raise SystemExit(f"no job events under {op.artifacts}")
    return events


def run_ends(op: OperatorProcess) -> list[str]:
    return re.findall(r"run end: SampleDB .*", op.logs())


def profile_sampledb(kube: Kube, runs: int) -> tuple[float, int]:
    """Prints and writes the tables; returns the whole run's median and the tasks in a run."""
    install_sampledb_crds(kube)
    ns = fresh_namespace(kube, "bench-profile-sdb")
    work = Path(tempfile.mkdtemp(prefix="bench-profile-sampledb-"))
    # health_requeue far away: only the runs this profile starts happen
    op = OperatorProcess(kube, ns, work, sampledb_watches(health_requeue="10h"),
                         ["--ansible-roles-path", str(ROOT / "roles")]).start()
    measured: list[Run] = []
    try:
        kube.custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, sample(NAME, replicas=3, deletionPolicy="Delete"))
        wait_phase(kube, ns, NAME, timeout=300)
        time.sleep(3)  # the runs the servers' start-up caused are over
        for i in range(runs + 1):
            before = len(run_ends(op))
            kube.custom.patch_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, NAME, {
                "metadata": {"annotations": {"bench.playbook-operator.dev/poke": str(time.time())}}})
            op.wait_for_log(r"run end: SampleDB", count=before + 1, timeout=120)
            line = run_ends(op)[before]
            if "changed=0" not in line:
                raise SystemExit(f"a run changed something, so this is no steady state: {line}")
            if i:  # the first one after start-up builds the module payloads
                measured.append(Run(float(re.search(r" in ([0-9.]+)s", line).group(1)), latest_run_events(op)))
    finally:
        # the database's finalizer needs the operator: it goes first
        kube.custom.delete_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, NAME)
        wait_for("the database deleted", lambda: gone(kube, ns, NAME), timeout=120)
        op.stop()
        delete_namespace(kube, ns)

    last = measured[-1]
    phase = {k: median([r.phases.get(k, 0) for r in measured]) for k in last.phases}
    task = {t: median([r.tasks.get(t, 0) for r in measured]) for t in last.tasks}
    whole = median([r.seconds for r in measured])
    rows = [["whole run (the operator's `run end`)", f"{whole:.2f}", str(len(last.outcomes))]]
    rows += [[k, f"{phase[k]:.2f}", str(last.counts.get(k, ""))] for k in sorted(phase, key=lambda k: -phase[k])]
    rows += [[f"slowest: {t[:90]}", f"{task[t]:.3f}", "1"] for t in sorted(task, key=lambda t: -task[t])[:8]]
    by_role: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for role, outcome in last.outcomes:
        by_role[role][outcome] += 1
    rows += [[f"role {role}", "", f"{c['ok']} ok, {c['skipped']} skipped"] for role, c in by_role.items()]
    write_table("profile-sampledb", ["SampleDB steady-state run, median", "seconds", "tasks"], rows, notes=[
        f"{runs} runs one after another on a Ready 3-server SampleDB (kwok), each started by an annotation, after "
        "one left out; nothing changes in any of them (changed=0)",
        "phases from each run's job events: a task runs from its start to its result (a module's task: a task "
        "worker forked, the arguments templated, the module run, the result sent back; set_fact, debug, assert, "
        "includes and skipped tasks run in the run's own process); "
        "between tasks is the controller's own work (callbacks, the next task's variables)"],
        role="the SampleDB operator (watches.yaml, roles/), warm executor")
    return whole, len(last.outcomes)
