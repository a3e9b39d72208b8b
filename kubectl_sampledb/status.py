"""Gathers what `kubectl sampledb status` shows: the SampleDB's status as the operator wrote it, each server
as its pod and its own PostgreSQL report it, the Services, the Lease, the backups, and the operator's last run.

Only the SampleDB and its pods are needed; anything else that cannot be read becomes a note, and a server
that cannot be queried is shown as such.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypeVar

from . import SERVER_CONTAINER, SWITCHOVER_ANNOTATION, lease_name
from .errors import CliError
from .kube import Cluster, pod_ready, pod_role
from .sql import QueryError, ServerReport, Standby, lsn_diff, parse_time, query_server

T = TypeVar("T")

# The conditions the runtime writes about its runs (runner/status.py), apart from the SampleDB's own.
RUN_CONDITIONS = ("Running", "Successful", "Failure")


@dataclass
class Condition:
    type: str
    status: str
    reason: str = ""
    message: str = ""
    last_transition_time: str | None = None


@dataclass
class Replication:
    """How a replica follows the primary: as the primary's pg_stat_replication sees it when it lists the
    replica (source "primary"), else as the replica's own WAL receiver does (source "replica")."""

    source: str
    state: str | None = None
    sync_state: str | None = None
    sent_lsn: str | None = None
    write_lsn: str | None = None
    flush_lsn: str | None = None
    replay_lsn: str | None = None
    lag_bytes: int | None = None
    lag_seconds: float | None = None


@dataclass
class Server:
    name: str
    role: str  # the pod's role label: what the operator decided
    ready: bool
    pod_phase: str
    restarts: int = 0
    reachable: bool = False
    error: str | None = None  # why it could not be queried
    in_recovery: bool | None = None  # what the server itself says
    server_version: str | None = None
    timeline: int | None = None
    lsn: str | None = None  # the primary's write position, a replica's replay position
    replication: Replication | None = None
    warnings: list[str] = field(default_factory=list)


@dataclass
class Services:
    """The ready pods each Service routes to (None: could not be read)."""

    primary: list[str] | None = None
    replicas: list[str] | None = None


@dataclass
class Backup:
    name: str
    reason: str
    phase: str
    size: str | None = None
    location: str | None = None
    created_at: str | None = None
    started_at: str | None = None
    completed_at: str | None = None
    age_seconds: float | None = None  # since it completed, else since it was created
    message: str | None = None


@dataclass
class Event:
    """An Event about the database: the operator's failovers, switchovers, refusals, failed runs."""

    type: str
    reason: str
    message: str
    count: int = 1
    last_seen: str | None = None
    age_seconds: float | None = None


@dataclass
class LastRun:
    result: str  # Successful | Failed
    ok: int | None = None
    changed: int | None = None
    skipped: int | None = None
    failures: int | None = None
    completed_at: str | None = None
    age_seconds: float | None = None


@dataclass
class Operator:
    """What the operator is doing: a run in progress or not, how the last one ended and why it failed."""

    state: str  # reconciling | idle | failed | unknown
    last_run: LastRun | None = None
    failure: str | None = None  # the failed tasks' messages (the Failure condition's message)
    activity: str | None = None  # the SampleDB's Progressing message while it is True
    switchover_requested: str | None = None
    primary_unready_since: str | None = None  # the leader role counts the failover grace period from here
    generation: int | None = None
    observed_generation: int | None = None


@dataclass
class DatabaseStatus:
    name: str
    namespace: str
    phase: str | None
    version: str | None
    spec_version: str | None
    ready: str | None  # "2/3"
    current_primary: str | None
    target_primary: str | None
    lease_holder: str | None  # "": the Lease names nobody (a change of primary in progress); None: not read
    conditions: list[Condition]
    servers: list[Server]
    services: Services
    backups: list[Backup]
    backups_total: int
    operator: Operator
    events: list[Event]
    notes: list[str]
    observed_at: str
    archive: dict[str, Any] | None = None  # status.archive: continuous archiving, as the primary last reported it
    # status.firstRecoverabilityPoint and lastRecoverabilityPoint: the times a recovery from the object store can reach
    recoverable: tuple[str, str] | None = None
    # the archive that range is in, when the primary archives elsewhere (a major upgrade, a new bucket or path)
    recoverable_elsewhere: str = ""


def gather(cluster: Cluster, name: str, backups: int = 5, events: int = 5, now: datetime | None = None,
           query_timeout: float = 10.0) -> DatabaseStatus:
    now = now or datetime.now(UTC)
    db = cluster.sampledb(name)
    pods = cluster.server_pods(name)
    notes: list[str] = []
    st = db.get("status") or {}
    meta = db.get("metadata") or {}

    reports = _query_all(cluster, pods, query_timeout)
    servers = [_server(pod, reports.get(pod.metadata.name)) for pod in pods]
    _replication(servers, reports, st.get("currentPrimary"))

    services = Services(
        primary=_optional(notes, lambda: cluster.ready_endpoints(f"{name}-primary")),
        replicas=_optional(notes, lambda: cluster.ready_endpoints(f"{name}-replicas")))
    lease = _optional(notes, lambda: cluster.lease(lease_name(name)))
    records = _optional(notes, lambda: cluster.backups_of(name)) or []
    recent = _optional(notes, lambda: cluster.events_about(name)) or []

    conditions = [_condition(c) for c in st.get("conditions") or [] if isinstance(c, dict) and c.get("type")]
    return DatabaseStatus(
        name=name, namespace=cluster.namespace, phase=st.get("phase"), version=st.get("version"),
        spec_version=(db.get("spec") or {}).get("version"), ready=st.get("readyReplicasText"),
        current_primary=st.get("currentPrimary"), target_primary=st.get("targetPrimary"),
        lease_holder=(lease.spec.holder_identity or "") if lease is not None and lease.spec else None,
        conditions=[c for c in conditions if c.type not in RUN_CONDITIONS],
        servers=servers, services=services,
        backups=_backups(records, backups, now), backups_total=len(records),
        operator=_operator(st, meta, now), events=_events(recent, events, now),
        notes=notes, observed_at=now.strftime("%Y-%m-%dT%H:%M:%SZ"), archive=st.get("archive") or None,
        recoverable=(st["firstRecoverabilityPoint"], st.get("lastRecoverabilityPoint") or "")
        if st.get("firstRecoverabilityPoint") else None,
        recoverable_elsewhere=st.get("recoverableArchive") or ""
        if st.get("recoverableArchive") not in (None, "", (st.get("archive") or {}).get("destination")) else "")


def _optional(notes: list[str], read: Callable[[], T]) -> T | None:
    try:
        return read()
    except CliError as exc:
        if str(exc) not in notes:  # both Services' lists are refused alike
            notes.append(str(exc))
        return None


def _query_all(cluster: Cluster, pods: list[Any], timeout: float) -> dict[str, ServerReport | str]:
    """Each running server's report, or why there is none; asked at once, so one slow server costs one timeout."""
    out: dict[str, ServerReport | str] = {}
    runnable = []
    for pod in pods:
        why = _not_running(pod)
        if why:
            out[pod.metadata.name] = why
        else:
            runnable.append(pod.metadata.name)

    def ask(pod_name: str) -> ServerReport | str:
        try:
            return query_server(cluster, pod_name, timeout)
        except QueryError as exc:
            return str(exc)

    if runnable:
        with ThreadPoolExecutor(max_workers=len(runnable)) as pool:
            out.update(zip(runnable, pool.map(ask, runnable), strict=True))
    return out


def _phase(pod: Any) -> str:
    return (pod.status.phase if pod.status else None) or "Unknown"


def _not_running(pod: Any) -> str | None:
    if pod.metadata.deletion_timestamp is not None:
        return "pod is terminating"
    phase = _phase(pod)
    if phase != "Running":
        return f"pod is {phase}"
    state = _container(pod)
    if state is None or state.state is None or state.state.running is None:
        waiting = state.state.waiting if state is not None and state.state is not None else None
        return "server container is not running" + (f" ({waiting.reason})" if waiting and waiting.reason else "")
    return None


def _container(pod: Any) -> Any | None:
    return next((c for c in (pod.status.container_statuses or []) if c.name == SERVER_CONTAINER), None)


def _server(pod: Any, report: ServerReport | str | None) -> Server:
    container = _container(pod)
    server = Server(name=pod.metadata.name, role=pod_role(pod), ready=pod_ready(pod), pod_phase=_phase(pod),
                    restarts=container.restart_count if container is not None else 0)
    if isinstance(report, ServerReport):
        server.reachable = True
        server.in_recovery = report.in_recovery
        server.server_version = report.server_version
        server.timeline = report.timeline
        server.lsn = report.replay_lsn if report.in_recovery else report.current_lsn
        if server.role == "primary" and report.in_recovery:
            server.warnings.append("labelled primary but still in recovery (being promoted?)")
        if server.role == "replica" and not report.in_recovery:
            server.warnings.append("labelled replica but accepts writes (being stopped?)")
    else:
        server.error = report or "not queried"
    return server


def _replication(servers: list[Server], reports: dict[str, ServerReport | str], current_primary: str | None) -> None:
    """Each replica's position and lag against the primary: the server that is out of recovery, the one
    the status names if it is."""
    writers = [s for s in servers if s.in_recovery is False]
    primary = next((s for s in writers if s.name == current_primary), None) or \
        next((s for s in writers if s.role == "primary"), None) or (writers[0] if writers else None)
    primary_report = reports.get(primary.name) if primary else None
    primary_report = primary_report if isinstance(primary_report, ServerReport) else None
    standbys = {s.name: s for s in primary_report.standbys} if primary_report else {}
    for server in servers:
        report = reports.get(server.name)
        if server is primary or not isinstance(report, ServerReport) or not report.in_recovery:
            continue
        row = standbys.get(server.name)
        server.replication = _from_primary(row, primary_report, report) if row and primary_report else \
            _from_replica(report, primary_report)
        if server.replication.state != "streaming":
            server.warnings.append("not streaming from the primary")
        if primary is not None and primary.timeline and server.timeline and primary.timeline != server.timeline:
            server.warnings.append(f"on timeline {server.timeline}, the primary on {primary.timeline}")


def _from_primary(row: Standby, primary: ServerReport, replica: ServerReport) -> Replication:
    lag_bytes = lsn_diff(primary.current_lsn, row.replay_lsn)
    # replay_lag is NULL once an idle replica has caught up, and also before it was ever measured
    lag_seconds = row.replay_lag if row.replay_lag is not None else \
        (0.0 if lag_bytes == 0 else _replica_side_seconds(replica))
    return Replication(source="primary", state=row.state, sync_state=row.sync_state, sent_lsn=row.sent_lsn,
                       write_lsn=row.write_lsn, flush_lsn=row.flush_lsn, replay_lsn=row.replay_lsn,
                       lag_bytes=lag_bytes, lag_seconds=lag_seconds)


def _from_replica(replica: ServerReport, primary: ServerReport | None) -> Replication:
    return Replication(source="replica", state=replica.receiver_status or "not streaming",
                       flush_lsn=replica.receive_lsn, replay_lsn=replica.replay_lsn,
                       lag_bytes=lsn_diff(primary.current_lsn, replica.replay_lsn) if primary else None,
                       lag_seconds=_replica_side_seconds(replica))


def _replica_side_seconds(replica: ServerReport) -> float | None:
    """How old the last replayed transaction is, by the replica's own clock; nothing to replay is no lag."""
    if replica.receive_lsn and replica.receive_lsn == replica.replay_lsn:
        return 0.0
    replayed, now = parse_time(replica.replay_timestamp), parse_time(replica.now)
    if replayed is None or now is None:
        return None
    return max(0.0, (now - replayed).total_seconds())


def _condition(c: dict[str, Any]) -> Condition:
    return Condition(type=str(c.get("type")), status=str(c.get("status", "Unknown")), reason=c.get("reason") or "",
                     message=c.get("message") or "", last_transition_time=c.get("lastTransitionTime"))


def _age(when: str | None, now: datetime) -> float | None:
    t = parse_time(when)
    return max(0.0, (now - t).total_seconds()) if t else None


def _backups(records: list[dict[str, Any]], limit: int, now: datetime) -> list[Backup]:
    def created(b: dict[str, Any]) -> str:
        return (b.get("metadata") or {}).get("creationTimestamp") or ""

    out = []
    for b in sorted(records, key=created, reverse=True)[:max(0, limit)]:
        st, spec = b.get("status") or {}, b.get("spec") or {}
        out.append(Backup(
            name=b["metadata"]["name"], reason=spec.get("reason") or "OnDemand", phase=st.get("phase") or "Pending",
            size=st.get("size") or None, location=st.get("location") or None, created_at=created(b) or None,
            started_at=st.get("startedAt"), completed_at=st.get("completedAt"),
            age_seconds=_age(st.get("completedAt") or created(b), now), message=st.get("message") or None))
    return out


def _events(items: list[Any], limit: int, now: datetime) -> list[Event]:
    def seen(e: Any) -> datetime:
        when = e.last_timestamp or e.event_time or e.metadata.creation_timestamp
        if isinstance(when, str):
            when = parse_time(when)
        return when if when is not None else datetime.min.replace(tzinfo=UTC)

    out = []
    for e in sorted(items, key=seen, reverse=True)[:max(0, limit)]:
        when = seen(e)
        known = when > datetime.min.replace(tzinfo=UTC)
        out.append(Event(type=e.type or "Normal", reason=e.reason or "", message=(e.message or "").strip(),
                         count=e.count or 1, last_seen=when.strftime("%Y-%m-%dT%H:%M:%SZ") if known else None,
                         age_seconds=max(0.0, (now - when).total_seconds()) if known else None))
    return out


def _operator(st: dict[str, Any], meta: dict[str, Any], now: datetime) -> Operator:
    """From the run conditions (runner/status.py): Running=True reason Running while a run is in progress;
    after a success Running=True reason Successful and Successful=True; after a failure Failure=True with the
    failed tasks' messages. ansibleResult is on Running after a success and on Failure after a failure."""
    # the conditions as written: ansibleResult is not one of a Condition's fields
    by_type = {c.get("type"): c for c in st.get("conditions") or [] if isinstance(c, dict)}
    running, success, failure, progressing = (by_type.get(t) or {}
                                              for t in ("Running", "Successful", "Failure", "Progressing"))
    failed = failure.get("status") == "True"
    in_progress = running.get("status") == "True" and running.get("reason") == "Running"
    last_run = None
    if failed or success.get("status") == "True" or running.get("reason") == "Successful":
        counts = (failure if failed else running).get("ansibleResult") or {}
        completed = counts.get("completion")
        last_run = LastRun(result="Failed" if failed else "Successful", ok=counts.get("ok"),
                           changed=counts.get("changed"), skipped=counts.get("skipped"),
                           failures=counts.get("failures"), completed_at=completed, age_seconds=_age(completed, now))
    return Operator(
        state="reconciling" if in_progress else "failed" if failed else "idle" if last_run else "unknown",
        last_run=last_run, failure=(failure.get("message") or "") if failed else None,
        activity=(progressing.get("message") or "") if progressing.get("status") == "True" else None,
        switchover_requested=(meta.get("annotations") or {}).get(SWITCHOVER_ANNOTATION),
        primary_unready_since=st.get("primaryUnreadySince"),
        generation=meta.get("generation"), observed_generation=st.get("observedGeneration"))
