"""`python -m bench.production CHECKOUT --object FILE ...`: a production Ansible operator's first reconcile,
the Go ansible-operator's and ours side by side on the same cluster.

The operator is any Operator SDK Ansible project checked out at CHECKOUT (its watches.yaml, roles/ and
playbooks/ run unchanged; none of it is part of this repository): its CRDs are applied from ``--crds``
(default: config/crd/bases), and each round makes a fresh namespace, starts one operator watching it, applies
the ``--object`` files (Secrets it expects, then the custom resource) and waits for that resource's first run
to end: the first Successful or Failure condition in its status. The implementations alternate within each
round, and each round starts with the other one, so that a machine whose load drifts weighs on both alike.

Per run: the wall time from the resource's creation to that condition, and the CPU time (user + system) of the
operator's whole process tree over the same span (each process's own and its reaped children's, from
/proc/<pid>/stat), which another tenant's load leaves almost as it is. The load average is noted per round.
Prints the table and writes it to bench/results/<date>-<name>.md (default: production) with the operator's
source. A namespace still terminating after DELETE_WAIT seconds is left to the cluster.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from bench.__main__ import write_table
from bench.harness import (
    OURS_READY,
    PEER_READY,
    OperatorRun,
    bench_cluster,
    delete_namespace,
    fresh_namespace,
    median,
    ours,
    peer,
)
from tests.kube import Kube

CLK_TCK = os.sysconf("SC_CLK_TCK")
DONE_TYPES = ("Successful", "Failure")
DELETE_WAIT = 90.0


def tree_cpu_seconds(pid: int) -> tuple[float, float]:
    """User + system CPU seconds of a process and its descendants, each with its reaped children; and of
    the process alone."""
    from bench.harness import _tree

    total = own = 0
    for p in _tree(pid):
        try:
            with open(f"/proc/{p}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except OSError:  # gone meanwhile: its time is in its parent's reaped children now
            continue
        total += sum(int(v) for v in fields[11:15])  # utime stime cutime cstime
        own += sum(int(v) for v in fields[11:13]) if p == pid else 0
    return total / CLK_TCK, own / CLK_TCK


@dataclass
class Project:
    checkout: Path
    source: str  # where it came from: repository and tag
    objects: list[dict[str, Any]]  # applied in order in each round's namespace; the last watched one is timed
    crds: Path
    env: dict[str, str] = field(default_factory=dict)

    @property
    def watches(self) -> Path:
        return self.checkout / "watches.yaml"

    def watched(self) -> dict[str, Any]:
        kinds = {(w["group"], w["kind"]) for w in yaml.safe_load(self.watches.read_text())}
        found = [o for o in self.objects if (o["apiVersion"].split("/")[0], o["kind"]) in kinds]
        if not found:
            raise SystemExit(f"none of the objects is of a kind {self.watches} watches")
        return found[-1]


@dataclass
class Measure:
    wall: float
    cpu: float
    operator_cpu: float  # the operator's own process (ours: the proxy, watches, status; the peer's: Go)
    load: float
    condition: str


def first_reconcile(kube: Kube, project: Project, impl: str, timeout: float = 600) -> Measure:
    ns = fresh_namespace(kube, f"bench-prod-{impl}")
    extra_env = {"ANSIBLE_ROLES_PATH": str(project.checkout / "roles"), **project.env}
    make = peer if impl == "peer" else ours
    op: OperatorRun = make(kube, ns, project.watches, extra_env=extra_env)
    op.start(PEER_READY if impl == "peer" else OURS_READY)
    target = project.watched()
    resource = f"{target['kind'].lower()}.{target['apiVersion'].split('/')[0]}"
    try:
        time.sleep(2)  # start-up's own work (the warm executor's first fork, the watches' lists) is over
        for obj in project.objects:
            if obj is not target:
                kube.kubectl("apply", "-n", ns, "-f", "-", input=yaml.safe_dump(obj))
        assert op.proc is not None
        (cpu0, own0), load = tree_cpu_seconds(op.proc.pid), os.getloadavg()[0]
        t0 = time.monotonic()
        kube.kubectl("create", "-n", ns, "-f", "-", input=yaml.safe_dump(target))
        name = target["metadata"]["name"]
        while True:
            out = kube.kubectl("get", "-n", ns, resource, name, "-o",
                               "jsonpath={range .status.conditions[*]}{.type}={.status} {end}").stdout
            done = [c.split("=")[0] for c in out.split() if c.split("=")[0] in DONE_TYPES and c.endswith("=True")]
            if done:
                wall, (cpu, own) = time.monotonic() - t0, tree_cpu_seconds(op.proc.pid)
                return Measure(wall, cpu - cpu0, own - own0, load, done[0])
            if time.monotonic() - t0 > timeout:
                raise TimeoutError(f"{impl}: no first result for {resource} {ns}/{name} in {timeout:.0f} s:\n"
                                   + op.logs()[-3000:])
            time.sleep(0.1)
    finally:
        op.stop()
        try:  # a busy controller manager may take minutes to empty a namespace: wait a while, not forever
            delete_namespace(kube, ns, timeout=DELETE_WAIT)
        except AssertionError:
            print(f"# namespace {ns} still terminating after {DELETE_WAIT:.0f} s; going on", flush=True)


def run(kube: Kube, project: Project, impls: list[str], rounds: int) -> dict[str, list[Measure]]:
    kube.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(project.crds))
    kube.kubectl("wait", "--for=condition=Established", "--timeout=60s", "crd", "--all")
    results: dict[str, list[Measure]] = {i: [] for i in impls}
    for r in range(rounds):
        for impl in impls if r % 2 == 0 else list(reversed(impls)):
            m = first_reconcile(kube, project, impl)
            print(f"# round {r + 1}, {impl}: {m.wall:.2f} s wall, {m.cpu:.2f} s CPU ({m.operator_cpu:.2f} s "
                  f"the operator's own), {m.condition} "
                  f"(load {m.load:.1f})", flush=True)
            results[impl].append(m)
    return results


LABELS = {"peer": "Go ansible-operator v1.42.3", "ours": "playbook-operator (warm)"}


def table(project: Project, results: dict[str, list[Measure]], name: str = "production") -> None:
    impls = list(results)
    rows = []
    for what, key in (("wall time, create → first result [s]", "wall"),
                      ("CPU time of the operator's process tree over it [s]", "cpu"),
                      ("of which the operator process's own [s]", "operator_cpu")):
        values = {i: median([getattr(m, key) for m in results[i]]) for i in impls}
        row = [f"{what}, median", *[f"{values[i]:.2f}" for i in impls]]
        if "peer" in values and "ours" in values:
            row.append(f"{values['peer'] / values['ours']:.1f}x")
        rows.append(row)
    for i in impls:
        rows.append([f"{LABELS[i]}: each run (wall / CPU, load)", *["" for _ in impls[:-1]],
                     "; ".join(f"{m.wall:.1f}/{m.cpu:.1f} ({m.load:.1f})" for m in results[i])])
    outcome = {i: sorted({m.condition for m in results[i]}) for i in impls}
    columns = ["measure", *[LABELS[i] for i in impls], *(["peer / ours"] if len(impls) > 1 else [])]
    rows = [r + [""] * (len(columns) - len(r)) for r in rows]
    write_table(name, columns, rows, role=f"{project.source}, run unchanged", notes=[
        f"{len(next(iter(results.values())))} rounds; in each a fresh namespace, one operator at a time, the "
        "implementations alternating (each round starts with the other one)",
        "first result: the first Successful or Failure condition in the resource's status; CPU: user + system "
        "of the operator and all its descendants (each with its reaped children), from /proc/<pid>/stat",
        "outcome of the first run: " + "; ".join(f"{LABELS[i]}: {', '.join(outcome[i])}" for i in impls),
        "objects applied first: " + ", ".join(f"{o['kind']} {o['metadata']['name']}" for o in project.objects)])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.production", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkout", type=Path, help="the operator project's directory (watches.yaml, roles/)")
    parser.add_argument("--source", required=True, help="where the checkout came from: repository and tag")
    parser.add_argument("--object", type=Path, action="append", required=True,
                        help="YAML file(s) applied in each namespace, in order; the last of a watched kind is timed")
    parser.add_argument("--crds", type=Path, help="CRD file or directory (default: CHECKOUT/config/crd/bases)")
    parser.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                        help="environment for both operators (as the project's image sets it)")
    parser.add_argument("--impl", action="append", choices=("peer", "ours"), help="default: peer and ours")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--name", default="production",
                        help="the results file's scenario name (default: %(default)s), e.g. production-before")
    args = parser.parse_args(argv)
    objects = [o for f in args.object for o in yaml.safe_load_all(f.read_text()) if o]
    project = Project(args.checkout.resolve(), args.source, objects,
                      (args.crds or args.checkout / "config" / "crd" / "bases").resolve(),
                      dict(e.split("=", 1) for e in args.env))
    results = run(bench_cluster(), project, args.impl or ["peer", "ours"], args.rounds)
    table(project, results, args.name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
