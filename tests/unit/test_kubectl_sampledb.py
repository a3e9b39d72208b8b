"""kubectl sampledb with fakes of the kubernetes client objects: what `status` gathers and shows (a lagging
replica, an unreachable server, a failed run and its task's message, -o json, colour only on a terminal), the
errors a user reads (not found, forbidden), and what backup, restore, switchover, psql and logs ask of the API."""

from __future__ import annotations

import functools
import io
import json
import re
import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kubectl_sampledb import BACKUPS, SAMPLEDBS, SWITCHOVER_ANNOTATION, actions, cli, logs, render, sql
from kubectl_sampledb.errors import CliError
from kubectl_sampledb.kube import Cluster, ExecError, ExecResult, Target, connect, exec_refusal
from kubectl_sampledb.status import gather

NS = "shop"
NOW = datetime(2026, 11, 24, 12, 0, 0, tzinfo=UTC)
PSQL_SOCKET_ERROR = ('psql: error: connection to server on socket "/var/run/postgresql/.s.PGSQL.5432" failed: '
                     'No such file or directory')
FAILED_TASKS = ("the restore Job inventory-restore failed (see its logs)\n"
                "Failed to patch object: Pod inventory-2 is being deleted")


# Fakes of the kubernetes client objects ---------------------------------------------------------------------

def api_error(status: int, message: str = "") -> ApiException:
    reason = {403: "Forbidden", 404: "Not Found", 409: "Conflict"}.get(status, "Error")
    exc = ApiException(status=status, reason=reason)  # kubernetes < 34 takes no body here
    exc.body = json.dumps({"kind": "Status", "status": "Failure", "message": message, "reason": reason,
                           "code": status})
    return exc


def forbidden(verb: str, resource: str, group: str = "") -> ApiException:
    return api_error(403, f'{resource} is forbidden: User "alice" cannot {verb} resource "{resource}" '
                          f'in API group "{group}" in the namespace "{NS}"')


class Forbids:
    """(verb, resource) pairs the fake API server refuses, as RBAC would."""

    def __init__(self) -> None:
        self.refused: set[tuple[str, str]] = set()

    def check(self, verb: str, resource: str, group: str = "") -> None:
        if (verb, resource) in self.refused:
            raise forbidden(verb, resource, group)


class FakeCustom(Forbids):
    """CustomObjectsApi over a dict; ``on_get`` lets a test change an object as the operator would."""

    def __init__(self) -> None:
        super().__init__()
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}
        self.created: list[dict[str, Any]] = []
        self.patches: list[tuple[str, dict[str, Any]]] = []
        self.on_get: dict[tuple[str, str], Any] = {}

    def add(self, plural: str, obj: dict[str, Any]) -> None:
        self.objects[(plural, obj["metadata"]["name"])] = obj

    def get_namespaced_custom_object(self, group: str, version: str, namespace: str, plural: str, name: str) -> dict:
        self.check("get", plural, group)
        hook = self.on_get.get((plural, name))
        if hook:
            hook(self)
        if (plural, name) not in self.objects:
            raise api_error(404, f'{plural}.{group} "{name}" not found')
        return json.loads(json.dumps(self.objects[(plural, name)]))

    def list_namespaced_custom_object(self, group: str, version: str, namespace: str, plural: str) -> dict:
        self.check("list", plural, group)
        return {"items": [json.loads(json.dumps(o)) for (p, _), o in self.objects.items() if p == plural]}

    def create_namespaced_custom_object(self, group: str, version: str, namespace: str, plural: str,
                                        body: dict) -> dict:
        self.check("create", plural, group)
        if (plural, body["metadata"]["name"]) in self.objects:
            raise api_error(409, "already exists")
        obj = {**body, "metadata": {**body["metadata"], "creationTimestamp": "2026-11-24T12:00:00Z"}}
        self.add(plural, obj)
        self.created.append(body)
        return obj

    def patch_namespaced_custom_object(self, group: str, version: str, namespace: str, plural: str, name: str,
                                       body: dict) -> dict:
        self.check("patch", plural, group)
        obj = self.objects[(plural, name)]
        annotations = body.get("metadata", {}).get("annotations") or {}
        obj["metadata"].setdefault("annotations", {}).update(annotations)
        self.patches.append((name, body))
        return obj


class FakeCore(Forbids):
    def __init__(self, pods: list[client.V1Pod], events: list[client.CoreV1Event] | None = None) -> None:
        super().__init__()
        self.pods = pods
        self.events = events or []
        self.logs: dict[str, str] = {}
        self.log_calls: list[dict[str, Any]] = []

    def list_namespaced_pod(self, namespace: str, label_selector: str = "") -> client.V1PodList:
        self.check("list", "pods")
        assert label_selector == "app.kubernetes.io/instance=inventory,statefulset.kubernetes.io/pod-name"
        return client.V1PodList(items=list(self.pods))

    def list_namespaced_event(self, namespace: str, field_selector: str = "") -> client.CoreV1EventList:
        self.check("list", "events")
        kind, name = re.fullmatch(r"involvedObject\.kind=(\w+),involvedObject\.name=(.+)", field_selector).groups()
        return client.CoreV1EventList(items=[e for e in self.events if e.involved_object.name == name
                                             and e.involved_object.kind == kind])

    def read_namespaced_pod_log(self, name: str, namespace: str, **kwargs: Any) -> str:
        self.check("get", "pods/log")
        self.log_calls.append({"pod": name, **kwargs})
        if name not in self.logs:
            raise api_error(400, f'container "postgres" in pod "{name}" is waiting to start')
        return self.logs[name]


class FakeDiscovery(Forbids):
    def __init__(self, routes: dict[str, list[str]]) -> None:
        super().__init__()
        self.routes = routes

    def list_namespaced_endpoint_slice(self, namespace: str, label_selector: str = "") -> client.V1EndpointSliceList:
        self.check("list", "endpointslices", "discovery.k8s.io")
        service = label_selector.removeprefix("kubernetes.io/service-name=")
        endpoints = [client.V1Endpoint(addresses=["10.0.0.1"], conditions=client.V1EndpointConditions(ready=True),
                                       target_ref=client.V1ObjectReference(kind="Pod", name=pod))
                     for pod in self.routes.get(service, [])]
        return client.V1EndpointSliceList(items=[client.V1EndpointSlice(address_type="IPv4", endpoints=endpoints)])


class FakeCoordination(Forbids):
    def __init__(self, holder: str | None) -> None:
        super().__init__()
        self.holder = holder

    def read_namespaced_lease(self, name: str, namespace: str) -> client.V1Lease:
        self.check("get", "leases", "coordination.k8s.io")
        assert name == "inventory-primary"
        return client.V1Lease(metadata=client.V1ObjectMeta(name=name),
                              spec=client.V1LeaseSpec(holder_identity=self.holder))


@dataclass
class FakeExec:
    """The server containers: what psql prints in each (JSON of sql.SERVER_QUERY), or how it fails."""

    answers: dict[str, ExecResult | Exception] = field(default_factory=dict)
    commands: list[tuple[str, list[str]]] = field(default_factory=list)

    def __call__(self, pod: str, command: list[str], timeout: float) -> ExecResult:
        self.commands.append((pod, command))
        answer = self.answers[pod]
        if isinstance(answer, Exception):
            raise answer
        return answer


# The database: inventory-0 primary, inventory-1 a replica 17 MiB and 12.5 s behind, inventory-2 unreachable ----

def pod(name: str, role: str, ready: bool = True, running: bool = True) -> client.V1Pod:
    state = client.V1ContainerState(running=client.V1ContainerStateRunning()) if running else \
        client.V1ContainerState(waiting=client.V1ContainerStateWaiting(reason="CrashLoopBackOff"))
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=name, labels={"sampledb.example.com/role": role}),
        status=client.V1PodStatus(
            phase="Running",
            conditions=[client.V1PodCondition(type="Ready", status="True" if ready else "False")],
            container_statuses=[client.V1ContainerStatus(name="postgres", ready=ready, restart_count=0, image="pg",
                                                         image_id="", state=state)]))


def event(reason: str, message: str, kind: str = "Warning", name: str = "", rv: str = "1",
          minutes_ago: int = 2) -> client.CoreV1Event:
    return client.CoreV1Event(
        metadata=client.V1ObjectMeta(name=name or f"inventory-{reason.lower()}", resource_version=rv),
        involved_object=client.V1ObjectReference(kind="SampleDB", name="inventory", namespace=NS),
        reason=reason, message=message, type=kind, count=1, last_timestamp=NOW - timedelta(minutes=minutes_ago))


def report(**fields: Any) -> ExecResult:
    doc = {"in_recovery": True, "server_version": "15.18", "now": "2026-11-24T12:00:00.000000+00:00",
           "current_lsn": None, "receive_lsn": None, "replay_lsn": None, "replay_timestamp": None,
           "timeline": 2, "receiver": None, "standbys": [], **fields}
    return ExecResult(0, json.dumps(doc) + "\n", "")


PRIMARY = report(in_recovery=False, current_lsn="0/5000000", standbys=[
    {"name": "inventory-1", "client_addr": "10.0.0.12", "state": "streaming", "sync_state": "quorum",
     "sent_lsn": "0/5000000", "write_lsn": "0/4800000", "flush_lsn": "0/4800000", "replay_lsn": "0/3F00000",
     "replay_lag": 12.5}])
LAGGING_REPLICA = report(receive_lsn="0/4800000", replay_lsn="0/3F00000",
                         replay_timestamp="2026-11-24T11:59:47.500000+00:00",
                         receiver={"status": "streaming", "sender_host": "inventory-primary"})


def sampledb(**status: Any) -> dict[str, Any]:
    return {
        "apiVersion": "sampledb.example.com/v1alpha1", "kind": "SampleDB",
        "metadata": {"name": "inventory", "namespace": NS, "generation": 3},
        "spec": {"version": "15.18", "replicas": 3, "storage": {"size": "2Gi"}, "parameters": {"max_connections": "200"},
                 "backup": {"schedule": "30 0 * * *", "retention": 7}, "deletionPolicy": "Snapshot",
                 "upgrade": {"allowMajor": False}},
        "status": {
            "phase": "Ready", "version": "15.18", "readyReplicas": 2, "readyReplicasText": "2/3",
            "currentPrimary": "inventory-0", "observedGeneration": 3,
            "conditions": [
                {"type": "Running", "status": "False", "reason": "Failed", "message": "Reconciliation failed",
                 "lastTransitionTime": "2026-11-24T11:58:00Z"},
                {"type": "Ready", "status": "True", "reason": "Serving",
                 "message": "2 of 3 servers ready; primary inventory-0", "lastTransitionTime": "2026-11-24T10:00:00Z"},
                {"type": "Progressing", "status": "True", "reason": "RollingOut", "message": "2 of 3 servers ready",
                 "lastTransitionTime": "2026-11-24T11:55:00Z"},
                {"type": "Degraded", "status": "True", "reason": "ServersNotReady", "message": "2 of 3 servers ready",
                 "lastTransitionTime": "2026-11-24T11:55:00Z"},
                {"type": "LastBackupSucceeded", "status": "True", "reason": "BackupCompleted",
                 "message": "backup inventory-20261124003000 completed", "lastTransitionTime": "2026-11-24T00:31:00Z"},
                {"type": "Failure", "status": "True", "reason": "Failed", "message": FAILED_TASKS,
                 "lastTransitionTime": "2026-11-24T11:58:00Z",
                 "ansibleResult": {"ok": 41, "changed": 2, "skipped": 12, "failures": 1,
                                   "completion": "2026-11-24T11:58:00.123456"}},
                {"type": "Successful", "status": "False", "reason": "", "message": "",
                 "lastTransitionTime": "2026-11-24T11:58:00Z"},
            ],
            **status}}


def backup_record(name: str, created: str, phase: str = "Completed", size: str = "3.1 MB",
                  database: str = "inventory", reason: str = "Scheduled", completed: str | None = None) -> dict:
    st: dict[str, Any] = {"phase": phase, "size": size, "location": f"pvc://{database}-backups/{database}/{name}.sql.gz"}
    if phase == "Completed":
        st["completedAt"] = completed or created
    return {"apiVersion": "sampledb.example.com/v1alpha1", "kind": "SampleDBBackup",
            "metadata": {"name": name, "creationTimestamp": created},
            "spec": {"database": database, "reason": reason}, "status": st}


@dataclass
class World:
    core: FakeCore
    custom: FakeCustom
    discovery: FakeDiscovery
    coordination: FakeCoordination
    exec: FakeExec

    def cluster(self, namespace: str = NS, **target: Any) -> Cluster:
        return Cluster(target=Target(namespace, **target), core=self.core, custom=self.custom,
                       discovery=self.discovery, coordination=self.coordination, executor=self.exec)

    def connect(self, kubeconfig: str | None, context: str | None, namespace: str | None) -> Cluster:
        return self.cluster(namespace or NS, kubeconfig=kubeconfig, context=context)


@pytest.fixture
def world() -> World:
    custom = FakeCustom()
    custom.add(SAMPLEDBS, sampledb())
    for b in (backup_record("inventory-20261122003000", "2026-11-22T00:30:00Z", completed="2026-11-22T00:30:40Z"),
              backup_record("inventory-20261123003000", "2026-11-23T00:30:00Z", completed="2026-11-23T00:30:40Z"),
              backup_record("inventory-20261124003000", "2026-11-24T00:30:00Z", completed="2026-11-24T00:30:42Z"),
              backup_record("before-upgrade", "2026-11-24T11:59:30Z", phase="Running", size="",
                            reason="OnDemand"),
              backup_record("other-db-1", "2026-11-24T11:00:00Z", database="orders")):
        custom.add(BACKUPS, b)
    core = FakeCore([pod("inventory-0", "primary"), pod("inventory-1", "replica"),
                     pod("inventory-2", "replica", ready=False)],
                    [event("ReconcileFailed", FAILED_TASKS, minutes_ago=2),
                     event("SwitchedOver", "switched the primary from inventory-1 to inventory-0", kind="Normal",
                           minutes_ago=50)])
    return World(core=core, custom=custom,
                 discovery=FakeDiscovery({"inventory-primary": ["inventory-0"], "inventory-replicas": ["inventory-1"]}),
                 coordination=FakeCoordination("inventory-0"),
                 exec=FakeExec({"inventory-0": PRIMARY, "inventory-1": LAGGING_REPLICA,
                                "inventory-2": ExecResult(2, "", PSQL_SOCKET_ERROR + "\n")}))


@pytest.fixture(autouse=True)
def fixed_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """`status` as the CLI runs it, at NOW (ages are relative to it)."""
    monkeypatch.setattr(cli, "gather", functools.partial(gather, now=NOW))


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def run(world: World, *argv: str, out: io.StringIO | None = None, stdin: io.StringIO | None = None,
        execvp: Any = None) -> tuple[int, str, str]:
    out = out if out is not None else io.StringIO()
    err = io.StringIO()
    console = cli.Console(out=out, err=err, stdin=stdin or io.StringIO(), execvp=execvp or _no_exec)
    rc = cli.main(list(argv), console=console, connect_fn=world.connect)
    return rc, out.getvalue(), err.getvalue()


def _no_exec(path: str, argv: list[str]) -> None:
    raise AssertionError("unexpected exec")


def section(text: str, title: str) -> list[str]:
    """The lines of one section of `status` (title line excluded), without their indentation."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(title))
    body = []
    for line in lines[start + 1:]:
        if not line.strip():
            break
        body.append(line[2:])
    return body


def row(lines: list[str], first: str) -> list[str]:
    return next(line.split() for line in lines if line.split() and line.split()[0] == first)


# status: gathering ------------------------------------------------------------------------------------------

def test_gather_reads_each_server_its_lag_and_the_operators_last_run(world: World) -> None:
    st = gather(world.cluster(), "inventory", now=NOW)
    primary, lagging, down = st.servers
    assert (primary.name, primary.role, primary.ready, primary.in_recovery) == ("inventory-0", "primary", True, False)
    assert (primary.timeline, primary.lsn, primary.replication) == (2, "0/5000000", None)

    assert (lagging.role, lagging.ready, lagging.timeline, lagging.lsn) == ("replica", True, 2, "0/3F00000")
    rep = lagging.replication
    assert rep is not None and rep.source == "primary" and (rep.state, rep.sync_state) == ("streaming", "quorum")
    assert rep.lag_bytes == 0x5000000 - 0x3F00000 == 17 * 1024 * 1024 and rep.lag_seconds == 12.5
    assert (rep.sent_lsn, rep.flush_lsn, rep.replay_lsn) == ("0/5000000", "0/4800000", "0/3F00000")

    assert (down.reachable, down.ready, down.error) == (False, False, PSQL_SOCKET_ERROR)
    assert down.replication is None and down.timeline is None

    op = st.operator
    assert op.state == "failed" and op.failure == FAILED_TASKS
    assert op.last_run is not None and op.last_run.result == "Failed"
    assert (op.last_run.ok, op.last_run.changed, op.last_run.failures) == (41, 2, 1)
    assert op.last_run.age_seconds == pytest.approx(120, abs=1)
    assert op.activity == "2 of 3 servers ready"

    # the run conditions are the operator's; the SampleDB's own stay in conditions
    assert [c.type for c in st.conditions] == ["Ready", "Progressing", "Degraded", "LastBackupSucceeded"]
    assert (st.services.primary, st.services.replicas, st.lease_holder) == (["inventory-0"], ["inventory-1"],
                                                                             "inventory-0")
    # this database's backups only, newest first
    assert [b.name for b in st.backups] == ["before-upgrade", "inventory-20261124003000",
                                            "inventory-20261123003000", "inventory-20261122003000"]
    assert st.backups_total == 4 and st.backups[1].size == "3.1 MB"
    assert st.backups[1].age_seconds == pytest.approx(11 * 3600 + 29 * 60 + 18)
    assert [e.reason for e in st.events] == ["ReconcileFailed", "SwitchedOver"]
    assert st.notes == []


def test_psql_runs_in_the_server_container_with_the_password_from_its_environment(world: World) -> None:
    gather(world.cluster(), "inventory", now=NOW)
    pods = sorted(p for p, _ in world.exec.commands)
    assert pods == ["inventory-0", "inventory-1", "inventory-2"]
    command = world.exec.commands[0][1]
    assert command[:2] == ["sh", "-c"] and command[3] == "sh" and command[4] == sql.SERVER_QUERY
    script = command[2]
    # the password moves inside the pod; the SQL is "$1", not spliced into the shell text
    assert 'PGPASSWORD="$POSTGRES_PASSWORD"' in script and "psql -XAtq" in script and '-c "$1"' in script
    for word in ("pg_stat_replication", "pg_current_wal_lsn()", "pg_last_wal_receive_lsn()",
                 "pg_last_wal_replay_lsn()", "pg_last_xact_replay_timestamp()", "pg_control_checkpoint()",
                 "replay_lag"):
        assert word in sql.SERVER_QUERY


def test_a_replica_the_primary_does_not_list_is_measured_by_its_own_receiver(world: World) -> None:
    world.exec.answers["inventory-0"] = report(in_recovery=False, current_lsn="0/5000000", standbys=[])
    st = gather(world.cluster(), "inventory", now=NOW)
    rep = st.servers[1].replication
    assert rep is not None and rep.source == "replica" and rep.state == "streaming"
    assert rep.lag_bytes == 17 * 1024 * 1024 and rep.lag_seconds == pytest.approx(12.5)

    # a caught-up replica has no replay lag, however old its last transaction
    world.exec.answers["inventory-1"] = report(receive_lsn="0/5000000", replay_lsn="0/5000000",
                                               replay_timestamp="2026-11-24T09:00:00+00:00")
    rep = gather(world.cluster(), "inventory", now=NOW).servers[1].replication
    assert rep is not None and (rep.lag_bytes, rep.lag_seconds) == (0, 0.0)
    assert "not streaming from the primary" in gather(world.cluster(), "inventory", now=NOW).servers[1].warnings


def test_a_server_that_cannot_be_queried_is_shown_as_such_not_an_error(world: World) -> None:
    world.core.pods[2] = pod("inventory-2", "replica", ready=False, running=False)
    world.exec.answers["inventory-1"] = ExecError('forbidden: User "alice" cannot create pods/exec in namespace shop')
    st = gather(world.cluster(), "inventory", now=NOW)
    assert st.servers[1].error == 'forbidden: User "alice" cannot create pods/exec in namespace shop'
    assert st.servers[2].error == "server container is not running (CrashLoopBackOff)"
    assert "inventory-2" not in [p for p, _ in world.exec.commands]  # not exec'd into at all
    world.exec.answers["inventory-0"] = ExecResult(None, "", "")
    assert gather(world.cluster(), "inventory", now=NOW, query_timeout=3).servers[0].error == "no answer within 3 s"


def test_what_cannot_be_read_besides_the_sampledb_and_its_pods_becomes_a_note(world: World) -> None:
    world.custom.refused.add(("list", BACKUPS))
    world.coordination.refused.add(("get", "leases"))
    world.core.refused.add(("list", "events"))
    st = gather(world.cluster(), "inventory", now=NOW)
    assert st.backups == [] and st.lease_holder is None and st.events == []
    assert st.notes == [
        'forbidden: User "alice" cannot get leases.coordination.k8s.io in namespace shop',
        'forbidden: User "alice" cannot list sampledbbackups.sampledb.example.com in namespace shop',
        'forbidden: User "alice" cannot list events in namespace shop']


def test_the_operator_reconciling_and_idle(world: World) -> None:
    db = world.custom.objects[(SAMPLEDBS, "inventory")]
    db["metadata"]["annotations"] = {SWITCHOVER_ANNOTATION: "inventory-2"}
    db["status"]["conditions"] = [
        {"type": "Running", "status": "True", "reason": "Running", "message": "Running reconciliation"},
        {"type": "Successful", "status": "False"}]
    op = gather(world.cluster(), "inventory", now=NOW).operator
    assert (op.state, op.last_run, op.failure, op.switchover_requested) == ("reconciling", None, None, "inventory-2")

    db["status"]["conditions"] = [
        {"type": "Running", "status": "True", "reason": "Successful", "message": "Awaiting next reconciliation",
         "ansibleResult": {"ok": 30, "changed": 0, "skipped": 9, "failures": 0,
                           "completion": "2026-11-24T11:59:20.5+00:00"}},
        {"type": "Successful", "status": "True", "reason": "Successful"},
        {"type": "Failure", "status": "False"}]
    db["status"]["primaryUnreadySince"] = "2026-11-24T11:59:55Z"
    st = gather(world.cluster(), "inventory", now=NOW)
    op = st.operator
    assert op.state == "idle" and op.failure is None and op.last_run is not None
    assert (op.last_run.result, op.last_run.ok, op.last_run.age_seconds) == ("Successful", 30, 39.5)
    operator = section(render.render_text(st), "Operator")
    assert operator[0] == "Now:        idle: the last run succeeded"
    assert operator[1] == "Last run:   Successful 39s ago (ok=30 changed=0 skipped=9 failures=0)"
    assert operator[2].startswith("Watching:   the primary has not been Ready since 2026-11-24T11:59:55Z (5s ago)")
    assert operator[3] == "Switchover: asked for: inventory-2"


# status: rendering ------------------------------------------------------------------------------------------

def test_status_table_plain_when_piped(world: World) -> None:
    rc, out, err = run(world, "status", "inventory")
    assert rc == 0 and err == ""
    assert "\x1b[" not in out
    assert out.splitlines()[0] == "SampleDB inventory in namespace shop"
    summary = out.split("\n\n")[0]
    assert re.search(r"Phase:\s+Ready$", summary, re.M) and re.search(r"Servers:\s+2/3 ready$", summary, re.M)
    assert re.search(r"Primary:\s+inventory-0$", summary, re.M)
    assert "inventory-primary → inventory-0;  inventory-replicas → inventory-1" in summary

    servers = section(out, "Servers")
    assert servers[0].split() == ["NAME", "ROLE", "READY", "TIMELINE", "LSN", "REPLICATION", "LAG", "REPLAY", "LAG"]
    assert row(servers, "inventory-0") == ["inventory-0", "primary", "yes", "2", "0/5000000", "-", "-", "-"]
    assert row(servers, "inventory-1") == ["inventory-1", "replica", "yes", "2", "0/3F00000", "streaming",
                                           "(quorum)", "17.0", "MiB", "12.5s"]
    assert row(servers, "inventory-2") == ["inventory-2", "replica", "no", "-", "-", "unreachable", "-", "-"]
    assert f"inventory-2: cannot query: {PSQL_SOCKET_ERROR}" in servers
    # the columns line up
    header = servers[0]
    assert all(line.index("2 ") == header.index("TIMELINE") for line in servers[1:3])

    conditions = section(out, "Conditions")
    assert row(conditions, "Degraded")[:4] == ["Degraded", "True", "ServersNotReady", "5m"]

    backups = section(out, "Backups (4)")
    assert row(backups, "inventory-20261124003000") == ["inventory-20261124003000", "Scheduled", "Completed", "3.1",
                                                        "MB", "11h"]
    assert row(backups, "before-upgrade")[:4] == ["before-upgrade", "OnDemand", "Running", "-"]

    operator = section(out, "Operator")
    assert operator[0].split(":", 1)[1].strip() == "waiting to retry: the last run failed"
    assert re.match(r"Last run:\s+Failed 119s ago \(ok=41 changed=2 skipped=12 failures=1\)$", operator[1])
    assert re.match(r"Failed task:\s+the restore Job inventory-restore failed \(see its logs\)$", operator[2])
    assert operator[3].strip() == "Failed to patch object: Pod inventory-2 is being deleted"
    assert re.match(r"Doing:\s+2 of 3 servers ready$", operator[4])
    assert "Could not read" not in out


def test_status_colour_on_a_terminal_unless_no_color(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NO_COLOR", raising=False)
    rc, out, _ = run(world, "status", "inventory", out=Tty())
    assert rc == 0 and "\x1b[32mReady\x1b[0m" in out and "\x1b[31munreachable\x1b[0m" in out
    assert "\x1b[33m17.0 MiB" in out  # the lagging replica
    # colour codes never shift a column
    plain = re.sub(r"\x1b\[\d+m", "", out)
    assert plain == run(world, "status", "inventory")[1]

    monkeypatch.setenv("NO_COLOR", "1")
    assert "\x1b[" not in run(world, "status", "inventory", out=Tty())[1]
    assert "\x1b[" in run(world, "status", "inventory", "--color", "always")[1]
    assert render.use_colour(Tty(), "never", {}) is False


def test_status_json_for_scripts(world: World) -> None:
    rc, out, _ = run(world, "status", "inventory", "-o", "json")
    assert rc == 0 and "\x1b[" not in out
    doc = json.loads(out)
    assert set(doc) >= {"name", "namespace", "phase", "version", "ready", "current_primary", "conditions", "servers",
                        "services", "backups", "operator", "events", "notes"}
    assert (doc["name"], doc["namespace"], doc["phase"], doc["current_primary"]) == ("inventory", NS, "Ready",
                                                                                      "inventory-0")
    by_name = {s["name"]: s for s in doc["servers"]}
    assert by_name["inventory-0"]["role"] == "primary" and by_name["inventory-0"]["timeline"] == 2
    lag = by_name["inventory-1"]["replication"]
    assert (lag["state"], lag["lag_bytes"], lag["lag_seconds"]) == ("streaming", 17825792, 12.5)
    assert by_name["inventory-2"]["reachable"] is False and by_name["inventory-2"]["error"] == PSQL_SOCKET_ERROR
    assert doc["operator"]["state"] == "failed" and doc["operator"]["failure"] == FAILED_TASKS
    assert doc["operator"]["last_run"]["failures"] == 1
    assert doc["backups"][1]["size"] == "3.1 MB" and doc["services"]["primary"] == ["inventory-0"]


def test_human_units() -> None:
    assert [render.human_duration(s) for s in (5, 119, 125, 1800, 5 * 3600 + 180, 30 * 3600, 3 * 86400 + 7200,
                                               20 * 86400)] == ["5s", "119s", "2m5s", "30m", "5h3m", "30h", "3d2h",
                                                                "20d"]
    assert [render.human_bytes(n) for n in (0, 1023, 1536, 17 * 1024 * 1024)] == ["0 B", "1023 B", "1.5 KiB",
                                                                                   "17.0 MiB"]
    assert [render.human_seconds(s) for s in (None, 0.0, 0.0042, 2.5, 42.4, 300)] == ["-", "0s", "0.0042s", "2.5s",
                                                                                      "42.4s", "5m"]
    assert sql.lsn("16/B374D848") == (0x16 << 32) + 0xB374D848 and sql.lsn_diff("0/10", "0/20") == 0


def test_parse_a_report_as_psql_prints_it() -> None:
    text = ('{"in_recovery" : false, "server_version" : "15.18 (Debian 15.18-1.pgdg120+1)", '
            '"now" : "2026-11-24T12:00:00.123+00:00", "current_lsn" : "0/3000148", "receive_lsn" : null, '
            '"replay_lsn" : null, "replay_timestamp" : null, "timeline" : 1, "receiver" : null, '
            '"standbys" : [{"name" : "db-1", "client_addr" : "10.42.0.7", "state" : "streaming", '
            '"sync_state" : "quorum", "sent_lsn" : "0/3000148", "write_lsn" : "0/3000148", '
            '"flush_lsn" : "0/3000148", "replay_lsn" : "0/3000148", "replay_lag" : null}]}\n')
    r = sql.parse_report(text)
    assert r.in_recovery is False and r.timeline == 1 and r.current_lsn == "0/3000148"
    assert r.standbys[0].name == "db-1" and r.standbys[0].replay_lag is None


# errors -----------------------------------------------------------------------------------------------------

def test_a_missing_sampledb_is_one_line_on_stderr(world: World) -> None:
    for command in (["status", "nope"], ["backup", "nope"], ["switchover", "nope", "--to", "nope-1"],
                    ["psql", "nope"], ["logs", "nope"]):
        rc, out, err = run(world, *command)
        assert (rc, out, err) == (1, "", "error: sampledb nope not found in namespace shop\n"), command
    rc, _, err = run(world, "-n", "other", "status", "nope")
    assert err == "error: sampledb nope not found in namespace other\n"
    rc, _, err = run(world, "restore", "gone", "--to", "copy")
    assert (rc, err) == (1, "error: sampledbbackup gone not found in namespace shop\n")


def test_no_permission_names_the_verb_and_resource(world: World) -> None:
    world.custom.refused.add(("get", SAMPLEDBS))
    rc, out, err = run(world, "status", "inventory")
    assert (rc, out) == (1, "")
    assert err == ('error: forbidden: User "alice" cannot get sampledbs.sampledb.example.com in namespace shop\n')

    world.custom.refused.clear()
    world.core.refused.add(("list", "pods"))
    assert run(world, "status", "inventory")[2] == 'error: forbidden: User "alice" cannot list pods in namespace shop\n'

    world.core.refused.clear()
    world.custom.refused.add(("create", BACKUPS))
    assert run(world, "backup", "inventory")[2] == (
        'error: forbidden: User "alice" cannot create sampledbbackups.sampledb.example.com in namespace shop\n')
    world.custom.refused.add(("patch", SAMPLEDBS))
    assert run(world, "switchover", "inventory", "--to", "inventory-1")[2] == (
        'error: forbidden: User "alice" cannot patch sampledbs.sampledb.example.com in namespace shop\n')


def test_an_exec_refused_at_the_websocket_handshake_names_pods_exec() -> None:
    exc = ApiException(status=0, reason='Handshake status 403 Forbidden -+-+- {"audit-id": "x"} -+-+- b\'{"kind":'
                                        '"Status","message":"pods \\"db-0\\" is forbidden: User \\"bob\\" cannot '
                                        'create resource \\"pods/exec\\" in API group \\"\\" in the namespace '
                                        '\\"shop\\""}\'')
    assert exec_refusal(exc, "db-0", NS) == 'forbidden: User "bob" cannot create pods/exec in namespace shop'
    gone = ApiException(status=0, reason="Handshake status 404 Not Found -+-+- {} -+-+- b''")
    assert exec_refusal(gone, "db-0", NS) == "pod db-0 not found"


def test_the_namespace_comes_from_the_flag_else_the_context_else_default(tmp_path: Path) -> None:
    cluster = {"name": "c", "cluster": {"server": "https://127.0.0.1:6443"}}
    user = {"name": "u", "user": {"token": "not-a-real-token"}}
    kubeconfig = tmp_path / "config"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "clusters": [cluster], "users": [user], "current-context": "team",
        "contexts": [{"name": "team", "context": {"cluster": "c", "user": "u", "namespace": "team-a"}},
                     {"name": "bare", "context": {"cluster": "c", "user": "u"}}]}))
    assert connect(str(kubeconfig)).namespace == "team-a"
    assert connect(str(kubeconfig), namespace="x").namespace == "x"
    assert connect(str(kubeconfig), context="bare").namespace == "default"
    assert connect(str(kubeconfig), context="bare").target.kubectl_flags() == [
        f"--kubeconfig={kubeconfig}", "--context=bare", "-n", "default"]
    with pytest.raises(CliError, match=r"^kubeconfig: "):
        connect(str(kubeconfig), context="missing")


# backup, restore, switchover -------------------------------------------------------------------------------

def follow(out: io.StringIO, **kw: Any) -> actions.Follow:
    ticks = iter(range(100000))
    return actions.Follow(out=out, sleep=lambda _: None, clock=lambda: float(next(ticks)), **kw)


def scripted(custom: FakeCustom, plural: str, name: str, states: list[dict[str, Any]]) -> None:
    """Each read of the object gets the next status (the last one stays)."""
    left = list(states)

    def step(fake: FakeCustom) -> None:
        if (plural, name) in fake.objects and left:
            fake.objects[(plural, name)]["status"] = left.pop(0) if len(left) > 1 else left[0]

    custom.on_get[(plural, name)] = step


def test_backup_creates_an_on_demand_backup_and_follows_it(world: World) -> None:
    scripted(world.custom, BACKUPS, "nightly", [
        {}, {"phase": "Pending"}, {"phase": "Running"}, {"phase": "Running"},
        {"phase": "Completed", "size": "3.2 MB", "location": "pvc://inventory-backups/inventory/nightly.sql.gz"}])
    out = io.StringIO()
    assert actions.backup(world.cluster(), "inventory", follow(out), name="nightly") == "nightly"
    assert world.custom.created == [{"apiVersion": "sampledb.example.com/v1alpha1", "kind": "SampleDBBackup",
                                     "metadata": {"name": "nightly"},
                                     "spec": {"database": "inventory", "reason": "OnDemand"}}]
    phases = [line.split("] ", 1)[1] for line in out.getvalue().splitlines()[1:]]
    assert phases == ["nightly Pending", "nightly Running",
                      "nightly Completed: 3.2 MB at pvc://inventory-backups/inventory/nightly.sql.gz"]

    generated = actions.backup(world.cluster(), "inventory", follow(io.StringIO(), wait=False), now=NOW)
    assert generated == "inventory-20261124120000"


def fast_follow(monkeypatch: pytest.MonkeyPatch) -> None:
    """The commands follow without waiting between looks."""
    monkeypatch.setattr(cli, "_follow", lambda args, console: follow(console.out, wait=not args.no_wait,
                                                                       timeout=args.timeout))


def test_a_failed_backup_exits_non_zero(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    scripted(world.custom, BACKUPS, "b1", [{"phase": "Running"},
                                           {"phase": "Failed", "message": "the backup Job failed after 2 retries"}])
    fast_follow(monkeypatch)
    rc, out, err = run(world, "backup", "inventory", "--backup-name", "b1")
    assert rc == 1 and "b1 Failed: the backup Job failed after 2 retries" in out
    assert err == "error: backup b1 failed: the backup Job failed after 2 retries\n"


def test_restore_copies_the_source_database_and_names_the_backup(world: World) -> None:
    out = io.StringIO()
    body = actions.restore(world.cluster(), "inventory-20261124003000", "copy", follow(out, wait=False))
    assert body["metadata"] == {"name": "copy"}
    assert body["spec"] == {"version": "15.18", "replicas": 3, "storage": {"size": "2Gi"},
                            "parameters": {"max_connections": "200"},
                            "backup": {"schedule": "30 0 * * *", "retention": 7}, "deletionPolicy": "Snapshot",
                            "restoreFrom": {"backup": "inventory-20261124003000"}}
    assert world.custom.created == [body]

    # the source is gone: the version must be given
    del world.custom.objects[(SAMPLEDBS, "inventory")]
    with pytest.raises(CliError, match="no longer exists: give --version"):
        actions.restore(world.cluster(), "inventory-20261124003000", "copy2", follow(out, wait=False))
    body = actions.restore(world.cluster(), "inventory-20261124003000", "copy2", follow(out, wait=False),
                           version="15.20", replicas=1)
    assert body["spec"] == {"version": "15.20", "replicas": 1, "restoreFrom": {"backup": "inventory-20261124003000"}}
    with pytest.raises(CliError, match=r"^sampledb copy2 already exists in namespace shop$"):
        actions.restore(world.cluster(), "inventory-20261124003000", "copy2", follow(out, wait=False), version="15.20")


def test_restore_follows_the_new_database_to_ready_or_failed(world: World) -> None:
    scripted(world.custom, SAMPLEDBS, "copy", [
        {"phase": "Provisioning", "conditions": [{"type": "Progressing", "status": "True",
                                                  "message": "restoring from SampleDBBackup b (Job copy-restore)"}]},
        {"phase": "Ready"}])
    out = io.StringIO()
    actions.restore(world.cluster(), "inventory-20261124003000", "copy", follow(out))
    assert [line.split("] ", 1)[1] for line in out.getvalue().splitlines()[1:]] == [
        "copy Provisioning: restoring from SampleDBBackup b (Job copy-restore)", "copy Ready"]

    scripted(world.custom, SAMPLEDBS, "copy3", [{"phase": "Failed", "conditions": [
        {"type": "Ready", "status": "False", "message": "restoring SampleDBBackup x failed (Job copy3-restore)"}]}])
    with pytest.raises(CliError, match=r"^sampledb copy3 failed: restoring SampleDBBackup x failed"):
        actions.restore(world.cluster(), "inventory-20261124003000", "copy3", follow(io.StringIO()))
    world.custom.objects[(BACKUPS, "bad")] = backup_record("bad", "2026-11-24T00:00:00Z", phase="Failed")
    with pytest.raises(CliError, match="failed, so it cannot be restored"):
        actions.restore(world.cluster(), "bad", "copy4", follow(io.StringIO()))


def test_switchover_annotates_and_follows_until_the_new_primary_serves(world: World) -> None:
    scripted(world.custom, SAMPLEDBS, "inventory", [
        sampledb()["status"], sampledb()["status"],
        {**sampledb()["status"], "phase": "SwitchingOver", "currentPrimary": None, "targetPrimary": "inventory-1"},
        {**sampledb()["status"], "phase": "SwitchingOver", "currentPrimary": "inventory-1"}])
    routes = iter([["inventory-0"], [], ["inventory-1"]])
    world.discovery.list_namespaced_endpoint_slice = _routes(world.discovery, routes)
    out = io.StringIO()
    actions.switchover(world.cluster(), "inventory", "inventory-1", follow(out))
    assert world.custom.patches == [("inventory", {"metadata": {"annotations": {SWITCHOVER_ANNOTATION: "inventory-1"}}})]
    said = [line.split("] ", 1)[-1] for line in out.getvalue().splitlines()]
    assert said == ["asked sampledb inventory to switch its primary from inventory-0 to inventory-1 "
                    "(sampledb.example.com/switchover-to=inventory-1)",
                    "inventory Ready: primary inventory-0",
                    "inventory SwitchingOver: primary none, promoting inventory-1",
                    "inventory SwitchingOver: primary inventory-1",
                    "inventory-primary routes to inventory-1"]


def _routes(discovery: FakeDiscovery, answers: Any) -> Any:
    def listing(namespace: str, label_selector: str = "") -> client.V1EndpointSliceList:
        discovery.routes = {"inventory-primary": next(answers)}
        return FakeDiscovery.list_namespaced_endpoint_slice(discovery, namespace, label_selector)

    return listing


def test_a_refused_switchover_exits_non_zero_with_the_operators_reason(world: World,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    world.core.events.append(event("SwitchoverRefused", "an old refusal", rv="7"))
    message = ("sampledb.example.com/switchover-to: inventory-2 is not Ready; a switchover needs a Ready replica, "
               "so the primary stays inventory-0")

    def refuse(fake: FakeCustom) -> None:
        if fake.patches:
            world.core.events[-1] = event("SwitchoverRefused", message, rv="9")

    world.custom.on_get[(SAMPLEDBS, "inventory")] = refuse
    fast_follow(monkeypatch)
    rc, _, err = run(world, "switchover", "inventory", "--to", "inventory-2")
    assert (rc, err) == (1, f"error: switchover refused: {message}\n")

    rc, _, err = run(world, "switchover", "inventory", "--to", "elsewhere-0")
    assert err == ("error: elsewhere-0 is not a server of sampledb inventory "
                   "(its servers: inventory-0, inventory-1, inventory-2)\n")
    rc, out, _ = run(world, "switchover", "inventory", "--to", "inventory-0")
    assert rc == 0 and out == "inventory-0 is already the primary of sampledb inventory\n"


# psql and logs ----------------------------------------------------------------------------------------------

def test_psql_execs_kubectl_with_the_users_cluster_flags(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBECTL", "/opt/bin/kubectl")
    calls: list[list[str]] = []
    rc, _, _ = run(world, "psql", "inventory", "--context", "prod", "--kubeconfig", "/k/config", "--",
                   "-c", "select 1", execvp=lambda path, argv: calls.append(argv))
    assert rc == 0
    assert calls == [["/opt/bin/kubectl", "--kubeconfig=/k/config", "--context=prod", "-n", NS, "exec", "-i",
                      "inventory-0", "-c", "postgres", "--", "sh", "-c",
                      'PGPASSWORD="$POSTGRES_PASSWORD" exec psql "$@"', "psql", "-c", "select 1"]]

    calls.clear()
    run(world, "-n", NS, "psql", "inventory", "--replica", stdin=Tty(), execvp=lambda path, argv: calls.append(argv))
    assert calls[0][calls[0].index("exec") + 1:calls[0].index("exec") + 3] == ["-it", "inventory-1"]
    # only psql takes arguments after --
    with pytest.raises(SystemExit):
        run(world, "status", "inventory", "--", "-c", "x")


def test_logs_are_merged_by_time_and_prefixed_with_the_pod(world: World) -> None:
    world.core.logs = {
        "inventory-0": "2026-11-24T11:00:00.1Z LOG:  database system is ready\n"
                       "2026-11-24T11:00:02Z LOG:  checkpoint starting: time\n",
        "inventory-1": "2026-11-24T11:00:01.000000001Z LOG:  started streaming WAL from primary at 0/3000000\n"}
    rc, out, err = run(world, "logs", "inventory", "--tail", "50")
    assert rc == 0
    assert out.splitlines() == ["[inventory-0] LOG:  database system is ready",
                                "[inventory-1] LOG:  started streaming WAL from primary at 0/3000000",
                                "[inventory-0] LOG:  checkpoint starting: time"]
    assert err.startswith("inventory-2: no log: ")
    assert {c["tail_lines"] for c in world.core.log_calls} == {50}
    assert all(c["timestamps"] is True and c["container"] == "postgres" for c in world.core.log_calls)


def test_following_logs_reconnects_without_repeating_lines(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    stop = threading.Event()
    streams = {"inventory-0": [[b"2026-11-24T11:00:00Z one\n2026-11-24T11:00:01Z tw", b"o\n"],
                               [b"2026-11-24T11:00:01Z two\n2026-11-24T11:00:03Z three\n"]]}

    class Response:
        def __init__(self, chunks: list[bytes]) -> None:
            self.chunks = chunks

        def stream(self, amt: int, decode_content: bool = True) -> Any:
            yield from self.chunks

    def read_log(name: str, namespace: str, **kwargs: Any) -> Any:
        world.core.log_calls.append({"pod": name, **kwargs})
        left = streams.get(name)
        if not left:
            if name == "inventory-0":
                stop.set()
            raise api_error(400, "container is waiting to start")
        return Response(left.pop(0))

    world.core.read_namespaced_pod_log = read_log
    out, err = io.StringIO(), io.StringIO()
    monkeypatch.setattr(logs, "RECONNECT_SECONDS", 0.01)
    logs.follow_logs(world.cluster(), "inventory", out, err, tail=10, server="inventory-0", stop=stop)
    assert out.getvalue().splitlines() == ["[inventory-0] one", "[inventory-0] two", "[inventory-0] three"]
    first, second = [c for c in world.core.log_calls if c["pod"] == "inventory-0"][:2]
    assert first["tail_lines"] == 10 and first["follow"] is True and "since_seconds" not in first
    assert "tail_lines" not in second and second["since_seconds"] >= 1


def test_status_shows_continuous_archiving_when_an_object_store_is_set(world: World) -> None:
    assert "Archive:" not in run(world, "status", "inventory")[1]
    world.custom.add(SAMPLEDBS, sampledb(archive={
        "destination": "s3://sampledb/shop/inventory", "lastArchivedWal": "000000020000000000000005",
        "lastArchivedAt": "2026-11-24T11:59:30Z", "waitingSegments": 2, "lagSeconds": 420,
        "lastError": "Could not connect to the endpoint URL\nretrying", "lastErrorAt": "2026-11-24T11:59:50Z"}))
    summary = run(world, "status", "inventory")[1].split("\n\n")[0]
    line = next(x for x in summary.splitlines() if x.strip().startswith("Archive:"))
    assert line.split("Archive:", 1)[1].strip() == (
        "s3://sampledb/shop/inventory: 000000020000000000000005 archived 30s ago, 2 waiting (oldest 7m); "
        "last error: Could not connect to the endpoint URL; retrying")
    assert "Recoverable:" not in summary  # (no base backup yet)
    world.custom.add(SAMPLEDBS, sampledb(firstRecoverabilityPoint="2026-11-24T06:00:09+00:00",
                                         lastRecoverabilityPoint="2026-11-24T11:59:30Z"))
    summary = run(world, "status", "inventory")[1].split("\n\n")[0]
    line = next(x for x in summary.splitlines() if x.strip().startswith("Recoverable:"))
    assert line.split("Recoverable:", 1)[1].strip() == "from 2026-11-24T06:00:09+00:00 to 2026-11-24T11:59:30Z"
    # after a major upgrade, until the new archive has a base backup: the range is the old archive's, up to the change
    world.custom.add(SAMPLEDBS, sampledb(firstRecoverabilityPoint="2026-11-24T06:00:09+00:00",
                                         recoverableArchive="s3://sampledb/shop/inventory/pg15",
                                         archive={"destination": "s3://sampledb/shop/inventory/pg18"}))
    summary = run(world, "status", "inventory")[1].split("\n\n")[0]
    line = next(x for x in summary.splitlines() if x.strip().startswith("Recoverable:"))
    assert line.split("Recoverable:", 1)[1].strip() == (
        "from 2026-11-24T06:00:09+00:00 in s3://sampledb/shop/inventory/pg15 (the primary archives elsewhere now, "
        "which has no base backup yet)")
