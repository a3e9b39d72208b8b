"""`python -m bench.failover_timeline [delete|kill|freeze|switchover] [--runs N]`: where the write gap of a change of
primary goes, on the local cluster's real node. The same fault and measure as `python -m bench.e2e` (its
change_of_primary, a writer running through the -primary Service, a 3-server database in sync mode), with a
timeline of each run, in seconds from the fault: the pods' changes, the -primary Service's endpoints, each pod's
unresolved neighbours (a stale gateway or pod address), the operator's runs and their tasks, the writer's failed
attempts in the gap, and when each replica streamed again. Asserts nothing; this is how the bridge's changing
MAC address, the replicas' hung connects to a pod that had gone and a switchover's wait for the kubelet were
found (README, "Benchmarks").
"""

from __future__ import annotations

import argparse
import datetime as dt
import subprocess
import threading
import time
from itertools import pairwise

from kubernetes import watch

from bench.e2e import Database, change_of_primary, sampledb_operator, switchover
from bench.harness import OperatorRun
from bench.profile import _at
from runner.execution.base import read_events
from tests.kube import Kube
from tests.realnode import POSTGRES_IMAGE, delete_pod, freeze_postmaster, kill_postmaster
from tests.sampledb import GROUP, VERSION
from tests.writes import Writer

FAULTS = {"delete": delete_pod, "kill": kill_postmaster, "freeze": freeze_postmaster, "switchover": switchover}
NAME = "ha"


class Timeline:
    def __init__(self) -> None:
        self.events: list[tuple[float, str]] = []
        self.stop = threading.Event()

    def note(self, what: str, at: float | None = None) -> None:
        self.events.append((time.time() if at is None else at, what))

    def watch_pods(self, kube: Kube, ns: str) -> None:
        seen: dict[str, tuple] = {}
        for ev in watch.Watch().stream(kube.core.list_namespaced_pod, ns, timeout_seconds=3600):
            if self.stop.is_set():
                return
            p = ev["object"]
            if not p.metadata.name.startswith(f"{NAME}-") or "-init-" in p.metadata.name:
                continue
            server = next((c for c in p.status.container_statuses or [] if c.name == "postgres"), None)
            state = next((s for s in ("running", "waiting", "terminated") if server and getattr(server.state, s)), "-")
            key = (p.metadata.uid[:6], (p.metadata.labels or {}).get("sampledb.example.com/role", "-"),
                   "deleting" if p.metadata.deletion_timestamp else "", state,
                   next((c.status for c in p.status.conditions or [] if c.type == "Ready"), "-"), p.status.pod_ip)
            if seen.get(p.metadata.name) != key:
                seen[p.metadata.name] = key
                self.note(f"pod {p.metadata.name} uid {key[0]} role={key[1]} {key[2]} postgres {key[3]}, "
                          f"Ready {key[4]}, ip {key[5]}")

    def sample_network(self, kube: Kube, ns: str) -> None:
        last: tuple = ()
        while not self.stop.is_set():
            eps = kube.core.read_namespaced_endpoints(f"{NAME}-primary", ns)
            ready = [a.ip for s in eps.subsets or [] for a in s.addresses or []]
            unresolved = {}
            for line in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.splitlines():
                netns = line.split()[0]
                bad = [n.split()[0] for n in subprocess.run(["ip", "netns", "exec", netns, "ip", "neigh"],
                                                            capture_output=True, text=True).stdout.splitlines()
                       if "FAILED" in n or "INCOMPLETE" in n]
                if bad:
                    unresolved[netns] = bad
            now = (tuple(ready), tuple(sorted((k, tuple(v)) for k, v in unresolved.items())))
            if now != last:
                last = now
                self.note(f"primary endpoints {ready}; unresolved neighbours {unresolved or 'none'}")
            time.sleep(0.5)


def _log_time(line: str, fmt: str, width: int) -> float | None:
    try:
        return dt.datetime.strptime(line[:width], fmt).replace(tzinfo=dt.UTC).timestamp()
    except ValueError:
        return None


def _task_starts(op: OperatorRun, ns: str, since: float, until: float) -> list[tuple[float, str]]:
    """When each task of the SampleDB's runs began, from the runner's artifacts (the run's job events)."""
    assert op.artifacts is not None
    runs = (op.artifacts / GROUP / VERSION / "SampleDB" / ns / NAME / "artifacts").glob("*/")
    return [(_at(ev), ev["event_data"].get("task", "")) for run in runs for ev in read_events(run)
            if ev.get("event") == "playbook_on_task_start" and since <= _at(ev) <= until]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.failover_timeline", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("fault", choices=sorted(FAULTS))
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args(argv)
    tl = Timeline()
    gaps = []
    with sampledb_operator("bench-timeline") as (kube, ns, op):
        db = Database(kube, ns, NAME, replicas=3)
        writer = Writer(kube, ns, NAME, POSTGRES_IMAGE, name="writer-timeline")
        for target in (tl.watch_pods, tl.sample_network):
            threading.Thread(target=target, args=(kube, ns), daemon=True).start()
        for _ in range(args.runs):
            time.sleep(2)
            tl.events.clear()
            began = time.time()
            result = change_of_primary(db, writer, FAULTS[args.fault])
            gaps.append(result["downtime"])
            writes = writer.writes()
            acked = sorted(writes.acked.values())
            acked = [t for t in acked if t < began][-1:] + [t for t in acked if t >= began]
            # (change_of_primary's own figure: the longest time between two acknowledged writes since the fault)
            start, end = max(pairwise(acked), key=lambda ab: ab[1] - ab[0])
            for line in op.logs().splitlines():
                at = _log_time(line, "%Y-%m-%d %H:%M:%S,%f", 23)
                if at and start - 1 <= at <= end + 1 and (" run start" in line or " run end" in line):
                    tl.note("operator " + line.split(": ", 1)[1][:110], at)
            for at, task in _task_starts(op, ns, start - 3, end):
                tl.note(f"operator task {task[:100]}", at)
            for seq, at in writes.failed.items():
                if start <= at <= end:
                    tl.note(f"writer failed: {writes.reasons.get(seq, '').rsplit('failed: ', 1)[-1][:110]}", at)
            for pod in (f"{NAME}-0", f"{NAME}-1", f"{NAME}-2"):
                log = kube.kubectl("-n", ns, "logs", pod, "-c", "postgres", "--since=120s", check=False).stdout
                for line in log.splitlines():
                    at = _log_time(line, "%Y-%m-%d %H:%M:%S.%f", 23)
                    if at and start <= at <= end + 1 and ("started streaming" in line or "No route" in line):
                        tl.note(f"{pod}: {line[24:140]}", at)
            tl.note(f"writes flow again (gap {end - start:.1f} s)", end)
            print(f"--- {args.fault}: write gap {result['downtime']:.1f} s, "
                  f"{'back as primary' if result['stayed'] else 'back as a replica'} {result['back']:.1f} s, "
                  f"{result['lost']} rows lost", flush=True)
            for at, what in sorted(tl.events):
                print(f"  {at - start:7.2f}  {what}", flush=True)
        writer.stop()
        tl.stop.set()
    print(f"write gaps: {', '.join(f'{g:.1f}' for g in gaps)} s", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
