"""backup, restore and switchover: each asks the operator for something through the API, as a user would with
kubectl apply or annotate, then follows it until it is done, printing each change it sees."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TextIO

from . import GROUP, SWITCHOVER_ANNOTATION, VERSION
from .errors import CliError, NotAServer, NotFound
from .kube import Cluster

# The backup's Job is named after it, and a Job's name must fit a label value.
MAX_BACKUP_NAME = 63
# What a restored database copies from the database its backup came from (not restoreFrom, not upgrade).
COPIED_SPEC = ("version", "replicas", "storage", "resources", "parameters", "replication", "backup", "deletionPolicy")
# The leader role removes the switchover annotation before the status role writes the new primary in the same
# run; an annotation gone this long with the primary unchanged was refused (or overtaken by another change).
REQUEST_GONE_GRACE = 20.0


@dataclass
class Follow:
    """How long and how often to look; the clock and sleep are parameters so that tests need not wait."""

    wait: bool = True
    timeout: float = 600.0
    interval: float = 1.0
    out: TextIO = field(default_factory=lambda: sys.stdout)
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.monotonic
    _start: float = field(default=0.0, init=False)

    def begin(self) -> None:
        self._start = self.clock()

    @property
    def elapsed(self) -> float:
        return self.clock() - self._start

    def expired(self) -> bool:
        return self.elapsed > self.timeout

    def say(self, text: str, timed: bool = True) -> None:
        prefix = f"[{self.elapsed:4.0f}s] " if timed else ""
        print(prefix + text, file=self.out, flush=True)


def backup(cluster: Cluster, database: str, follow: Follow, name: str | None = None,
           now: datetime | None = None) -> str:
    """Creates an on-demand SampleDBBackup of the database and follows it to Completed (or raises on Failed)."""
    cluster.sampledb(database)  # a clear error for a database that does not exist, before anything is created
    name = name or f"{database}-{(now or datetime.now(UTC)).strftime('%Y%m%d%H%M%S')}"
    if len(name) > MAX_BACKUP_NAME:
        raise CliError(f"backup name {name} is longer than {MAX_BACKUP_NAME} characters (its Job is named after it); "
                       "give a shorter one with --backup-name")
    cluster.create_backup({"apiVersion": f"{GROUP}/{VERSION}", "kind": "SampleDBBackup", "metadata": {"name": name},
                           "spec": {"database": database, "reason": "OnDemand"}})
    follow.begin()
    follow.say(f"sampledbbackup {name} created (database {database}, namespace {cluster.namespace})", timed=False)
    if not follow.wait:
        return name
    last = None
    while True:
        st = cluster.backup(name).get("status") or {}
        phase = st.get("phase") or "Pending"
        why = st.get("message") or f"see kubectl describe sdbb {name}"
        if phase != last:
            detail = ""
            if phase == "Completed":
                detail = f": {st.get('size') or 'size unknown'} at {st.get('location') or '?'}"
            elif phase == "Failed":
                detail = f": {why}"
            follow.say(f"{name} {phase}{detail}")
            last = phase
        if phase == "Completed":
            return name
        if phase == "Failed":
            raise CliError(f"backup {name} failed: {why}")
        if follow.expired():
            raise CliError(f"backup {name} is still {phase} after {follow.timeout:g} s "
                           f"(kubectl get sdbb {name} -w follows it)")
        follow.sleep(follow.interval)


def restore_spec(source: dict[str, Any] | None, backup_name: str, version: str | None,
                 replicas: int | None, source_name: str) -> dict[str, Any]:
    """The new database's spec: the source database's (its version included) when it still exists, else
    the version the user gives; restoreFrom names the backup."""
    spec: dict[str, Any] = {}
    if source is not None:
        spec = {k: v for k, v in (source.get("spec") or {}).items() if k in COPIED_SPEC}
    elif not version:
        raise CliError(f"sampledb {source_name}, the database backup {backup_name} was taken of, no longer exists: "
                       "give --version (its PostgreSQL version, or a newer one)")
    if version:
        spec["version"] = version
    if replicas is not None:
        spec["replicas"] = replicas
    spec["restoreFrom"] = {"backup": backup_name}
    return spec


def restore(cluster: Cluster, backup_name: str, new: str, follow: Follow, version: str | None = None,
            replicas: int | None = None) -> dict[str, Any]:
    """Creates SampleDB ``new`` from the backup and follows it to Ready (or raises on Failed)."""
    b = cluster.backup(backup_name)
    phase = (b.get("status") or {}).get("phase") or "Pending"
    if phase == "Failed":
        raise CliError(f"sampledbbackup {backup_name} failed, so it cannot be restored; "
                       "pick a completed one (kubectl get sdbb)")
    source_name = (b.get("spec") or {}).get("database") or ""
    try:
        source = cluster.sampledb(source_name) if source_name else None
    except NotFound:
        source = None
    spec = restore_spec(source, backup_name, version, replicas, source_name)
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "SampleDB", "metadata": {"name": new}, "spec": spec}
    cluster.create_sampledb(body)
    follow.begin()
    follow.say(f"sampledb {new} created from sampledbbackup {backup_name} (version {spec['version']}, "
               f"{spec.get('replicas', 1)} server(s)" + (f", spec copied from {source_name}" if source else "") + ")",
               timed=False)
    if phase != "Completed":
        follow.say(f"sampledbbackup {backup_name} is {phase}: the restore waits for it", timed=False)
    if follow.wait:
        _follow_phase(cluster, new, follow, "Ready")
    return body


def _follow_phase(cluster: Cluster, name: str, follow: Follow, goal: str) -> dict[str, Any]:
    seen: tuple[str, str] | None = None
    while True:
        db = cluster.sampledb(name)
        st = db.get("status") or {}
        phase = st.get("phase") or "Pending"
        progress = _condition(st, "Progressing").get("message") or ""
        if (phase, progress) != seen:
            follow.say(f"{name} {phase}" + (f": {progress}" if progress and phase != goal else ""))
            seen = (phase, progress)
        if phase == goal:
            return db
        if phase == "Failed":
            why = _condition(st, "Ready").get("message") or "see kubectl describe sdb " + name
            raise CliError(f"sampledb {name} failed: {why}")
        if follow.expired():
            raise CliError(f"sampledb {name} is still {phase} after {follow.timeout:g} s "
                           f"(kubectl get sdb {name} -w follows it)")
        follow.sleep(follow.interval)


def _condition(st: dict[str, Any], ctype: str) -> dict[str, Any]:
    return next((c for c in st.get("conditions") or [] if isinstance(c, dict) and c.get("type") == ctype), {})


def _refusals(cluster: Cluster, name: str) -> dict[str, tuple[str, str]] | None:
    """The SwitchoverRefused Events about the database, by name: (resourceVersion, message). The operator bumps
    an Event of the same name, so a new refusal is a new name or a new resourceVersion. None: not readable."""
    try:
        events = cluster.events_about(name)
    except CliError:
        return None
    return {e.metadata.name: (e.metadata.resource_version or "", e.message or "")
            for e in events if e.reason == "SwitchoverRefused"}


def switchover(cluster: Cluster, name: str, to: str, follow: Follow) -> None:
    """Annotates the database with the server to promote, then follows until status.currentPrimary is that
    server and the primary Service routes to it, or the operator refuses (a SwitchoverRefused Event)."""
    db = cluster.sampledb(name)
    servers = [p.metadata.name for p in cluster.server_pods(name)]
    if to not in servers:
        raise NotAServer(to, name, servers)
    current = (db.get("status") or {}).get("currentPrimary")
    if current == to:
        follow.say(f"{to} is already the primary of sampledb {name}", timed=False)
        return
    before = _refusals(cluster, name)
    cluster.patch_sampledb(name, {"metadata": {"annotations": {SWITCHOVER_ANNOTATION: to}}})
    follow.begin()
    follow.say(f"asked sampledb {name} to switch its primary from {current or 'none'} to {to} "
               f"({SWITCHOVER_ANNOTATION}={to})", timed=False)
    if before is None:
        follow.say("(cannot list events here: a refusal shows only as the request being dropped)", timed=False)
    if not follow.wait:
        return
    seen: tuple[Any, ...] | None = None
    gone_since: float | None = None
    while True:
        db = cluster.sampledb(name)
        st = db.get("status") or {}
        state = (st.get("phase"), st.get("currentPrimary"), st.get("targetPrimary"))
        if state != seen:
            follow.say(f"{name} {state[0] or 'Pending'}: primary {state[1] or 'none'}"
                       + (f", promoting {state[2]}" if state[2] else ""))
            seen = state
        if st.get("currentPrimary") == to:
            break
        if before is not None:
            after = _refusals(cluster, name) or {}
            refused = [msg for ev, (rv, msg) in after.items() if before.get(ev, ("", ""))[0] != rv]
            if refused:
                raise CliError(f"switchover refused: {refused[0]}")
        requested = ((db.get("metadata") or {}).get("annotations") or {}).get(SWITCHOVER_ANNOTATION)
        gone_since = None if requested else (gone_since if gone_since is not None else follow.elapsed)
        if gone_since is not None and follow.elapsed - gone_since > REQUEST_GONE_GRACE:
            raise CliError(f"the switchover request was dropped and the primary is still "
                           f"{st.get('currentPrimary') or 'none'} (kubectl describe sdb {name} says why)")
        if follow.expired():
            raise CliError(f"the primary of sampledb {name} is still {st.get('currentPrimary') or 'none'} after "
                           f"{follow.timeout:g} s")
        follow.sleep(follow.interval)
    _follow_service(cluster, name, to, follow)


def _follow_service(cluster: Cluster, name: str, to: str, follow: Follow) -> None:
    """The switchover is done for clients once the primary Service routes to the new primary alone."""
    while True:
        try:
            routes = cluster.ready_endpoints(f"{name}-primary")
        except CliError as exc:
            follow.say(f"(cannot see where {name}-primary routes: {exc})")
            return
        if routes == [to]:
            follow.say(f"{name}-primary routes to {to}")
            return
        if follow.expired():
            raise CliError(f"{to} is the primary, but {name}-primary still routes to {', '.join(routes) or 'no server'} "
                           f"after {follow.timeout:g} s")
        follow.sleep(follow.interval)
