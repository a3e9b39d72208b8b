"""Proof with rows: a writer that records every commit the server acknowledged, and a checker that
records which servers accept writes, both as pods in the database's namespace reaching the servers the
way applications do (Services, per-pod DNS) with the credentials Secret mounted as environment.

The writer inserts 1, 2, 3, ... into ``acked_writes``, one transaction and one connection per row, and
prints ``ack N <epoch>`` only after psql returned success for that row; a failed or ambiguous commit is
printed as ``fail``. Whatever an operation does, every acknowledged N must be in the database afterwards;
rows that were never acknowledged may or may not be there.

Each psql is bounded (``timeout``), as an application's statement and socket timeouts bound its queries: a
connection made just before a partition would otherwise wait for TCP to give up (many minutes) after the
partition is healed. A writer's timed-out insert counts as failed (never acknowledged).

The checker polls each server with ``select pg_is_in_recovery()`` and prints ``<epoch> <pod> f|t|down``;
``primaries_overlap`` finds two servers whose read-write spells (first to last ``f`` seen) overlap. A poll can miss a
short overlap: ``server_history`` reads each server's own record (entrypoint.sh writes sampledb-history.log on its
volume: ``writable`` just before its server starts as a primary or is promoted, ``stopped`` once it has exited, ``ended`` at the
last write of a server killed without a record, written when its volume is next started), whose spells are wider than
the truth of what each server acknowledged at both ends, and ``history_overlaps`` finds two that overlap at all.
"""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise

from tests.kube import Kube, wait_for
from tests.realnode import POSTGRES_IMAGE, psql_in_server, ready_database, simple_pod, wait_pod_ready
from tests.sampledb import get, roles

TABLE = "acked_writes"
STOP_FILE = "/tmp/stop"

_WRITER = f"""
export PGCONNECT_TIMEOUT=3
until psql -X -q -v ON_ERROR_STOP=1 -h "$HOST" -d app -c \
    'create table if not exists {TABLE} (seq bigint primary key, at timestamptz not null default now())' \
    >/dev/null 2>&1; do sleep 0.5; done
echo ready
i=${{START:-0}}
while [ ! -e {STOP_FILE} ]; do
  i=$((i + 1))
  if out=$(timeout 10 psql -X -q -A -t -v ON_ERROR_STOP=1 -h "$HOST" -d app \
      -c "insert into {TABLE} (seq) values ($i)" 2>&1); then
    echo "ack $i $(date +%s.%N)"
  else
    echo "fail $i $(date +%s.%N) $(echo "$out" | tr '\\n' ' ' | cut -c1-400)"
    sleep 0.2
  fi
done
echo stopped
exec sleep infinity
"""

_CHECKER = f"""
export PGCONNECT_TIMEOUT=1
while [ ! -e {STOP_FILE} ]; do
  for pod in $SERVERS; do
    r=$(timeout 3 psql -X -q -A -t -h "$pod.$HEADLESS" -d app -c 'select pg_is_in_recovery()' 2>/dev/null) || r=down
    echo "$(date +%s.%N) $pod ${{r:-down}}"
  done
  sleep 0.2
done
echo stopped
exec sleep infinity
"""


def _script_pod(name: str, image: str, database: str, script: str, env: dict[str, str],
                avoid_node: str | Sequence[str] | None = None) -> dict:
    """A bash script as uid 999 with the database's app credentials as PGUSER/PGPASSWORD; with ``avoid_node`` (a node
    or several), on any other node (where a fault of that node leaves it running)."""
    avoided = [avoid_node] if isinstance(avoid_node, str) else list(avoid_node or [])
    secret = f"{database}-credentials"
    placement = {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "NotIn", "values": avoided}]}]}}}} \
        if avoided else {}
    pod = simple_pod(name, ["bash", "-c", script], image=image,
                     securityContext={"runAsUser": 999, "runAsGroup": 999, "runAsNonRoot": True}, **placement)
    pod["spec"]["containers"][0]["env"] = [{"name": k, "value": v} for k, v in env.items()] + [
        {"name": "PGUSER", "valueFrom": {"secretKeyRef": {"name": secret, "key": "username"}}},
        {"name": "PGPASSWORD", "valueFrom": {"secretKeyRef": {"name": secret, "key": "password"}}}]
    return pod


class _ScriptPod:
    """One of the scripts above running in a pod: its log is the record; STOP_FILE ends the loop."""

    def __init__(self, kube: Kube, namespace: str, name: str, body: dict) -> None:
        self.kube, self.namespace, self.name = kube, namespace, name
        kube.core.create_namespaced_pod(namespace, body)
        wait_pod_ready(kube, namespace, name)

    def logs(self) -> str:
        return self.kube.core.read_namespaced_pod_log(self.name, self.namespace)

    def _stop(self) -> None:
        self.kube.kubectl("-n", self.namespace, "exec", self.name, "--", "touch", STOP_FILE)
        wait_for(f"{self.name} to stop", lambda: "stopped" in self.logs(), timeout=60, interval=0.5)


@dataclass
class Writes:
    """What the writer saw: acknowledged and failed sequence numbers with the time of each."""

    acked: dict[int, float]
    failed: dict[int, float]
    reasons: dict[int, str]  # a failed attempt's error, as psql printed it (cut)

    def acked_before(self, epoch: float) -> set[int]:
        return {seq for seq, at in self.acked.items() if at < epoch}

    def longest_gap(self, start: float | None = None, end: float | None = None) -> float:
        """The longest time between two consecutive acknowledgements (write downtime); with ``start`` and
        ``end``, from the last one before ``start`` to the last one before ``end``."""
        times = sorted(self.acked.values())
        if start is not None:
            last = end if end is not None else float("inf")
            times = [t for t in times if t <= start][-1:] + [t for t in times if start < t <= last]
        return max((b - a for a, b in pairwise(times)), default=0.0)


def table_rows(kube: Kube, namespace: str, pod: str) -> set[int]:
    """The sequence numbers in the writer's table on that server."""
    out = psql_in_server(kube, namespace, pod, f"select seq from {TABLE} order by seq", database="app")
    return {int(x) for x in out.split()}


class Writer(_ScriptPod):
    def __init__(self, kube: Kube, namespace: str, database: str, image: str, name: str = "writer",
                 start: int = 0, avoid_node: str | Sequence[str] | None = None) -> None:
        """``start``: the rows go on from there (a database restored from one that a writer wrote already)."""
        host = f"{database}-primary.{namespace}.svc"
        super().__init__(kube, namespace, name, _script_pod(name, image, database, _WRITER,
                                                            {"HOST": host, "START": str(start)}, avoid_node))
        wait_for(f"{name} to have written", lambda: len(self.writes().acked) >= 5, timeout=120, interval=1)

    def writes(self) -> Writes:
        acked, failed, reasons = {}, {}, {}
        for line in self.logs().splitlines():
            parts = line.split(maxsplit=3)
            if len(parts) >= 3 and parts[0] in ("ack", "fail"):
                (acked if parts[0] == "ack" else failed)[int(parts[1])] = float(parts[2])
                if parts[0] == "fail":
                    reasons[int(parts[1])] = parts[3] if len(parts) > 3 else ""
        return Writes(acked, failed, reasons)

    def wait_for_more(self, count: int = 20, timeout: float = 180) -> None:
        """Waits until ``count`` more rows than now are acknowledged (writes flow again)."""
        target = len(self.writes().acked) + count
        wait_for(f"{count} more acknowledged writes", lambda: len(self.writes().acked) >= target,
                 timeout=timeout, interval=1)

    def stop(self) -> Writes:
        self._stop()
        return self.writes()


class PrimaryChecker(_ScriptPod):
    def __init__(self, kube: Kube, namespace: str, database: str, servers: list[str], image: str,
                 name: str = "checker", avoid_node: str | Sequence[str] | None = None) -> None:
        env = {"SERVERS": " ".join(servers), "HEADLESS": f"{database}-headless.{namespace}.svc"}
        super().__init__(kube, namespace, name, _script_pod(name, image, database, _CHECKER, env, avoid_node))

    def observations(self) -> list[tuple[float, str, str]]:
        out = []
        for line in self.logs().splitlines():
            m = re.fullmatch(r"(\d+\.\d+) (\S+) (\S+)", line.strip())
            if m:
                out.append((float(m.group(1)), m.group(2), m.group(3)))
        return out

    def stop(self) -> list[tuple[float, str, str]]:
        self._stop()
        return self.observations()


def primary_spells(observations: list[tuple[float, str, str]]) -> list[tuple[str, float, float]]:
    """(server, first, last) for each run of consecutive read-write observations of a server."""
    spells: list[tuple[str, float, float]] = []
    open_: dict[str, tuple[float, float]] = {}
    for at, pod, state in sorted(observations):
        if state == "f":
            first = open_.get(pod, (at, at))[0]
            open_[pod] = (first, at)
        elif pod in open_:
            spells.append((pod, *open_.pop(pod)))
    spells.extend((pod, first, last) for pod, (first, last) in open_.items())
    return sorted(spells, key=lambda s: s[1])


def primaries_overlap(observations: list[tuple[float, str, str]]) -> list[tuple[tuple, tuple]]:
    """Pairs of read-write spells of different servers that overlap in time: two primaries at once."""
    spells = primary_spells(observations)
    return [(a, b) for i, a in enumerate(spells) for b in spells[i + 1:]
            if a[0] != b[0] and b[1] <= a[2]]



HISTORY = "/var/lib/postgresql/data/sampledb-history.log"


def server_history(kube: Kube, namespace: str, servers: list[str]) -> dict[str, list[tuple[float, str]]]:
    """Each server's own record of when it could take writes: [(epoch, writable|stopped|rewound)] from its volume."""
    out: dict[str, list[tuple[float, str]]] = {}
    for pod in servers:
        def read(pod: str = pod) -> subprocess.CompletedProcess:
            proc = kube.kubectl("-n", namespace, "exec", pod, "-c", "postgres", "--", "cat", HISTORY, check=False)
            if proc.returncode != 0 and "No such file" not in proc.stderr:
                # (not an AssertionError: wait_for tries again, as a restarting container cannot be exec'd a moment)
                raise RuntimeError(f"no history of {pod}: {proc.stderr.strip()}")
            return proc
        proc = wait_for(f"the history of {pod}", read, timeout=60, interval=1)
        entries = []
        for line in proc.stdout.splitlines():
            parts = line.split()
            if len(parts) == 3:
                entries.append((float(parts[0]), parts[2]))
        out[pod] = entries
    return out


def history_spells(history: dict[str, list[tuple[float, str]]], now: float) -> list[tuple[str, float, float]]:
    """(server, from, to) for each time a server could take writes: from its ``writable`` to its next ``stopped`` or
    ``ended`` (``now`` when it has not stopped since)."""
    spells = []
    for pod, entries in history.items():
        began = None
        for at, what in sorted(entries):
            if what == "writable" and began is None:
                began = at
            elif what in ("stopped", "ended") and began is not None:
                spells.append((pod, began, at))
                began = None
        if began is not None:
            spells.append((pod, began, now))
    return sorted(spells, key=lambda s: s[1])


def history_overlaps(history: dict[str, list[tuple[float, str]]], now: float) -> list[tuple[tuple, tuple]]:
    """Pairs of spells of different servers that overlap at all: two servers that could both take writes."""
    spells = history_spells(history, now)
    return [(a, b) for i, a in enumerate(spells) for b in spells[i + 1:] if a[0] != b[0] and b[1] < a[2]]


def under_writes(kube: Kube, namespace: str, name: str, away_from_primary: bool = False, pod_suffix: str = "",
                 **spec: object) -> tuple[str, list[str], PrimaryChecker, Writer]:
    """A Ready database with the checker and the writer running (with ``away_from_primary``, not on the primary's
    node; their pods' names end with ``pod_suffix``): its primary, its servers, both pods."""
    primary = ready_database(kube, namespace, name, **spec)["status"]["currentPrimary"]
    servers = sorted(roles(kube, namespace, name))
    avoid = kube.core.read_namespaced_pod(primary, namespace).spec.node_name if away_from_primary else None
    return (primary, servers, PrimaryChecker(kube, namespace, name, servers, POSTGRES_IMAGE,
                                             name=f"checker{pod_suffix}", avoid_node=avoid),
            Writer(kube, namespace, name, POSTGRES_IMAGE, name=f"writer{pod_suffix}", avoid_node=avoid))


def assert_safe(kube: Kube, namespace: str, name: str, writes: Writes, observations: list, servers: list[str],
                may_lose: bool = False) -> str:
    """Every acknowledged row is on the one primary (unless ``may_lose``: async mode, where the caller counts what is
    missing), no two servers could take writes at once (by the checker's polls and by each server's own record), and
    every other server comes back as a replica. Returns the primary."""
    primary = get(kube, namespace, name)["status"]["currentPrimary"]
    assert psql_in_server(kube, namespace, primary, "select pg_is_in_recovery()") == "f"
    missing = sorted(set(writes.acked) - table_rows(kube, namespace, primary))
    assert may_lose or not missing, (f"{len(missing)} acknowledged rows lost: {missing[:20]}\n"
                                     + lost_rows_context(kube, namespace, name, writes, missing, observations, servers))
    assert primaries_overlap(observations) == [], "two servers accepted writes at once (polled)"
    for pod in servers:
        if pod != primary:
            wait_for(f"{pod} to be a replica", lambda p=pod: psql_in_server(
                kube, namespace, p, "select pg_is_in_recovery()", check=False) == "t", timeout=300, interval=2)
    overlaps = history_overlaps(server_history(kube, namespace, servers), time.time())
    assert overlaps == [], f"two servers could take writes at once (their own records): {overlaps}"
    return primary


def lost_rows_context(kube: Kube, namespace: str, name: str, writes: Writes, missing: list[int], observations: list,
                      servers: list[str]) -> str:
    """What a user would look at when acknowledged rows are missing: when they were acknowledged, which servers the
    checker saw taking writes around then, each server's own record, and the database's Events."""
    def clock(epoch: float) -> str:
        return time.strftime("%H:%M:%S", time.gmtime(epoch))
    acked = sorted(writes.acked[n] for n in missing)
    lines = [f"lost rows acknowledged from {clock(acked[0])} to {clock(acked[-1])} UTC",
             "primary spells polled: " + ", ".join(f"{pod} {clock(a)}-{clock(b)}"
                                                     for pod, a, b in primary_spells(observations))]
    try:
        for pod, records in server_history(kube, namespace, servers).items():
            lines.append(f"{pod}: " + "; ".join(f"{clock(at)} {what}" for at, what in records[-12:]))
    except Exception as error:  # (context for a failure already found: never a failure of its own)
        lines.append(f"server records unreadable: {error}")
    for pod in servers:
        log = kube.kubectl("-n", namespace, "logs", pod, "-c", "postgres", "--tail=40", "--timestamps", check=False)
        lines.append(f"--- {pod}'s server, last lines ---\n{log.stdout}{log.stderr}")
    events = kube.kubectl("get", "events", "-n", namespace, "--sort-by=.lastTimestamp", check=False)
    lines.append(events.stdout[-6000:])
    return "\n".join(lines)


def kill_operator_mid_change(kube: Kube, namespace: str, name: str, old: str, operator, start) -> None:
    """SIGKILLs the operator once the Lease records a change of primary away from ``old`` (fenced, nobody promoted
    yet), and starts another (which leads once the killed one's lease has expired)."""
    wait_for("the change of primary recorded in the Lease", lambda: (
        kube.coordination.read_namespaced_lease(f"{name}-primary", namespace).metadata.annotations or {}).get(
        "sampledb.example.com/fencing") == old, timeout=300, interval=0.5)
    operator.kill_group()
    start()
