"""A tiny kubelet on loopback for SampleDB's pods, so that real PostgreSQL runs them as a real node would,
from what the roles render (tests/scripts/manifests.py):

- a server pod runs the rendered StatefulSet's command (entrypoint.sh from the rendered ConfigMap), with the
  container's rendered environment (Secret and downward API values filled in), as PID 1 of a PID namespace of
  its own (so that SIGTERM reaches it as the runtime sends it: only a handled signal is delivered to an init
  process), as the pod securityContext's runAsUser/runAsGroup with fsGroup as a supplementary group;
- volumes are directories: the data volume is created by root with mode 0777, as local-path-provisioner's
  hostPath volumes are (no fsGroup change); an emptyDir 0777; the ConfigMap's files and the downward API's labels
  file root-owned 0644;
- the probes are the rendered exec commands, run with the container's environment and their timeout;
- a Job's pod runs the rendered Job's command and environment the same way, its PVCs being directories;
- a Service is a port: `<db>-primary` is the pod whose role label is primary (a client finds 127.0.0.1 and that
  pod's port in PGHOST/PGPORT; a replica in PRIMARY_HOST/PRIMARY_PORT).

Each pod has a port and socket directory of its own (knobs postgres_port and postgres_socket_dir), so its
manifests are rendered for it. Paths the pods' scripts only know by default (/etc/sampledb, /etc/podinfo/labels)
come from CONF_DIR and LABELS_FILE.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from tests.plugins import plugin
from tests.scripts.manifests import render, sampledb_vars

_common = plugin("roles/common/filter_plugins/sampledb.py")


def sync_names(names: list[str]) -> str:
    """What the leader role tells each server (the roles' own filter)."""
    return _common.sampledb_synchronous_standby_names(names[0].rsplit("-", 1)[0], len(names))

T = TypeVar("T")
SERVER_TEMPLATES = ["configmap.yaml.j2", "statefulset.yaml.j2"]
JOB_TEMPLATES = ["init-job.yaml.j2", "job.yaml.j2", "restore-job.yaml.j2", "migration-job.yaml.j2", "prune-job.yaml.j2"]


def wait_for(what: str, check: Callable[[], T], timeout: float = 60, interval: float = 0.3) -> T:
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _dir(path: Path, mode: int = 0o755) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    os.chmod(path, mode)
    return path


def _expand(value: str, env: dict[str, str]) -> str:
    """Kubernetes' $(VAR) references to variables defined earlier in the list."""
    return re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", lambda m: env.get(m.group(1), m.group(0)), value)


def _map(value: str, mounts: dict[str, Path]) -> str:
    """A path in the container, as the directory that stands for its volume here (also inside `bash -c` text)."""
    for mount_path, local in sorted(mounts.items(), key=lambda kv: -len(kv[0])):
        value = re.sub(re.escape(mount_path) + r"(?=/|$|\s|\"|')", str(local), value)
    return value


def _container_env(container: dict[str, Any], secrets: dict[str, str], fields: dict[str, str],
                   mounts: dict[str, Path]) -> dict[str, str]:
    env: dict[str, str] = {}
    for e in container.get("env", []):
        if "value" in e:
            value = _expand(str(e["value"]), env)
        elif "secretKeyRef" in e["valueFrom"]:
            value = secrets[e["valueFrom"]["secretKeyRef"]["key"]]
        else:
            value = fields[e["valueFrom"]["fieldRef"]["fieldPath"]]
        assert isinstance(value, str), (e, value)
        env[e["name"]] = _map(value, mounts)
    return env


def _default_signals() -> None:
    """A container's process starts with every signal at its default, as runc leaves them. A test run started
    in the background by a non-interactive shell inherits SIGINT and SIGQUIT ignored, and bash cannot trap a
    signal ignored on entry: the entrypoint would never hear the images' stop signal (SIGINT)."""
    for sig in (signal.SIGINT, signal.SIGQUIT):
        signal.signal(sig, signal.SIG_DFL)


@dataclass
class Identity:
    uid: int
    gid: int
    groups: list[int]

    @classmethod
    def of(cls, pod_spec: dict[str, Any]) -> Identity:
        sc = pod_spec["securityContext"]
        assert sc["runAsNonRoot"] and sc["runAsUser"] != 0, sc
        return cls(sc["runAsUser"], sc["runAsGroup"], [sc["fsGroup"]] if "fsGroup" in sc else [])

    def argv(self, env: dict[str, str], cmd: list[str]) -> list[str]:
        return ["setpriv", f"--reuid={self.uid}", f"--regid={self.gid}",
                f"--groups={','.join(map(str, self.groups))}" if self.groups else "--clear-groups",
                "--", "env", "-i", *[f"{k}={v}" for k, v in env.items()], *cmd]


@dataclass
class Database:
    """One SampleDB: its pods (one rendering each), its Jobs (rendered once), its Secret."""
    node: Loopback
    name: str
    secrets: dict[str, str]
    pods: list[Pod] = field(default_factory=list)
    jobs: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    backups: dict[str, Path] = field(default_factory=dict)  # PVC name -> its directory

    def primary(self) -> Pod:
        primaries = [p for p in self.pods if p.role == "primary"]
        assert len(primaries) == 1, [(p.name, p.role) for p in self.pods]
        return primaries[0]

    def run_job(self, template: str, job_name: str, check: bool = True, timeout: float = 120,
                volumes: dict[str, Path] | None = None) -> subprocess.CompletedProcess[str]:
        """The rendered Job's pod, once (a Job's one attempt): its command, env and volumes, as its runAsUser."""
        [job] = self.jobs[template]
        spec = job["spec"]["template"]["spec"]
        [container] = spec["containers"]
        claims = {**self.backups, **(volumes or {})}
        mounts: dict[str, Path] = {}
        for m in container.get("volumeMounts", []):
            vol = next(v for v in spec["volumes"] if v["name"] == m["name"])
            if "configMap" in vol:
                assert vol["configMap"]["name"] == f"{self.name}-config", vol
                mounts[m["mountPath"]] = self.pods[0].conf
            elif "persistentVolumeClaim" in vol:
                mounts[m["mountPath"]] = claims[vol["persistentVolumeClaim"]["claimName"]]
        fields = {"metadata.labels['batch.kubernetes.io/job-name']": job_name, "metadata.name": f"{job_name}-x1"}
        env = _container_env(container, self.secrets, fields, mounts)
        primary = self.primary()
        assert env.get("PGHOST", f"{self.name}-primary") == f"{self.name}-primary", env  # the primary's Service
        env.update(PGHOST="127.0.0.1", PGPORT=str(primary.port), PATH=self.node.path, LANG="C.UTF-8",
                   HOME=str(self.node.root))
        cmd = [_map(arg, mounts) for arg in container["command"]]
        proc = subprocess.run(Identity.of(spec).argv(env, cmd), capture_output=True, text=True, timeout=timeout,
                              check=False)
        if check and proc.returncode != 0:
            raise AssertionError(f"Job {job_name} ({template}) failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
        return proc


@dataclass
class Pod:
    """One server pod of the StatefulSet, its volumes kept across (container) restarts."""
    db: Database
    name: str
    port: int
    root: Path
    manifests: dict[str, list[dict[str, Any]]]
    role: str = ""
    # the operator's instructions (role.sh), without the sampledb.example.com/ prefix
    annotations: dict[str, str] = field(default_factory=dict)
    proc: subprocess.Popen[bytes] | None = None
    starts: int = 0

    @property
    def spec(self) -> dict[str, Any]:
        return self.manifests["statefulset.yaml.j2"][0]["spec"]["template"]["spec"]

    @property
    def container(self) -> dict[str, Any]:
        return self.spec["containers"][0]

    @property
    def user(self) -> Identity:
        return Identity.of(self.spec)

    @property
    def volume(self) -> Path:  # the data volume's directory
        return self.root / "volume"

    @property
    def conf(self) -> Path:
        return self.root / "config"

    @property
    def labels(self) -> Path:
        return self.root / "podinfo" / "labels"

    @property
    def mounts(self) -> dict[str, Path]:
        local = {"data": self.volume, "config": self.conf, "podinfo": self.labels.parent}
        out = {}
        for m in self.container["volumeMounts"]:
            vol = next((v for v in self.spec["volumes"] if v["name"] == m["name"]), {"name": m["name"]})
            if m["name"] in local:
                out[m["mountPath"]] = local[m["name"]]
            elif "emptyDir" in vol and m["mountPath"] != "/dev/shm":
                out[m["mountPath"]] = Path(m["mountPath"])  # the socket directory: rendered as a path of its own
        return out

    @property
    def pgdata(self) -> Path:
        return Path(self.env()["PGDATA"])

    def lease(self, holder: str, age: float = 0.0) -> None:
        """Writes what the pod's Lease agent writes after a read of the Lease naming `holder`, sent `age` s ago."""
        sent = time.clock_gettime(time.CLOCK_BOOTTIME) - age
        path = Path(self.env()["PGHOST"]) / "sampledb-lease"
        tmp = path.with_name("sampledb-lease.tmp")
        tmp.write_text(f"{holder} {sent:.2f}\n")
        os.chown(tmp, self.user.uid, self.user.gid)
        tmp.replace(path)

    def env(self) -> dict[str, str]:
        env = _container_env(self.container, self.db.secrets, {"metadata.name": self.name}, self.mounts)
        primary = next((p for p in self.db.pods if p.role == "primary" and p is not self), None)
        assert env["PRIMARY_HOST"] == f"{self.db.name}-primary", env
        env.update(PRIMARY_HOST="127.0.0.1", PRIMARY_PORT=str(primary.port if primary else free_port()),
                   CONF_DIR=str(self.conf), LABELS_FILE=str(self.labels), PATH=self.db.node.path, LANG="C.UTF-8",
                   HOME=str(self.root))
        return env

    def prepare(self) -> None:
        """The pod's volumes, as the node makes them."""
        _dir(self.root)
        if not self.volume.exists():
            _dir(self.volume, 0o777)  # local-path: a hostPath directory created mode 0777 by root
        for mount_path, local in self.mounts.items():
            if local == Path(mount_path):
                _dir(local, 0o777)  # emptyDir
        _dir(self.conf)
        for key, text in self.manifests["configmap.yaml.j2"][0]["data"].items():
            (self.conf / key).write_text(text)
            os.chmod(self.conf / key, 0o644)
        _dir(self.labels.parent)

    @property
    def annotations_file(self) -> Path:
        return self.labels.parent / "annotations"

    def _podinfo(self, path: Path, items: dict[str, str]) -> None:
        # as the kubelet writes it: key="value" (Go's %q), sorted, the file replaced in one step
        tmp = path.with_suffix(".tmp")
        tmp.write_text("".join(f'{k}={json.dumps(v)}\n' for k, v in sorted(items.items())))
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)

    def label(self, role: str, **annotations: str | None) -> None:
        """The operator relabels the pod (and changes its annotations, None removing one); the kubelet rewrites the
        downward API files."""
        self.annotate(**annotations)
        self.role = role
        self._podinfo(self.labels, {"app.kubernetes.io/instance": self.db.name, "app.kubernetes.io/name": "sampledb",
                                    "sampledb.example.com/role": role})

    def annotate(self, **annotations: str | None) -> None:
        for key, value in annotations.items():
            key = key.replace("_", "-")
            if value is None:
                self.annotations.pop(key, None)
            else:
                self.annotations[key] = value
        self._podinfo(self.annotations_file, {f"sampledb.example.com/{k}": v for k, v in self.annotations.items()})

    def start(self, role: str | None = None, **annotations: str | None) -> Pod:
        """Starts the container (again: a restart keeps the volumes), with that label and those annotations."""
        self.prepare()
        if role:
            self.label(role, **annotations)
        else:
            self.annotate(**annotations)
        cmd = [_map(arg, self.mounts) for arg in self.container["command"]]
        self.starts += 1
        log = open(self.root / "container.log", "ab")  # the child writes it; closed here after the fork
        log.write(f"--- start {self.starts}\n".encode())
        log.flush()
        self.proc = subprocess.Popen(["unshare", "--pid", "--fork", "--mount-proc", *self.user.argv(self.env(), cmd)],
                                     stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     preexec_fn=_default_signals)
        log.close()
        self.db.node.procs.append(self.proc)
        self.db.node.inits.append(self.init_pid() or 0)
        return self

    def init_pid(self) -> int | None:
        """The host pid of the container's PID 1 (the child of unshare --fork); None once it has exited."""
        assert self.proc is not None
        proc = self.proc

        def child() -> list[str] | bool:
            try:
                return Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split() or proc.poll() is not None
            except FileNotFoundError:
                return True  # unshare is gone: so is its child
        children = wait_for("the container's init process", child, timeout=10, interval=0.05)
        return int(children[0]) if isinstance(children, list) else None

    def stop(self, sig: int = signal.SIGTERM, timeout: float | None = None) -> int:
        """Sends `sig` to PID 1 as the runtime does; waits up to terminationGracePeriodSeconds for it to exit."""
        assert self.proc is not None
        init = self.init_pid()
        assert init is not None, f"{self.name} has exited already:\n{self.log()[-4000:]}"
        os.kill(init, sig)
        return self.proc.wait(timeout if timeout is not None else self.spec["terminationGracePeriodSeconds"])

    def exited(self) -> bool:
        return self.proc is not None and self.proc.poll() is not None

    def log(self) -> str:
        return (self.root / "container.log").read_text(errors="replace")

    def probe(self, kind: str) -> int:
        """The rendered exec probe (startupProbe, readinessProbe, livenessProbe): its exit status; -1 on timeout."""
        probe = self.container[kind]
        try:
            return self.exec(probe["exec"]["command"], timeout=probe["timeoutSeconds"]).returncode
        except subprocess.TimeoutExpired:
            return -1

    def exec(self, command: list[str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """A command in the container, as `kubectl exec` (the leader role's k8s_exec) runs it: its environment,
        user and mounts."""
        return subprocess.run(self.user.argv(self.env(), [_map(arg, self.mounts) for arg in command]),
                              capture_output=True, text=True, timeout=timeout, check=False)

    def wait_ready(self, timeout: float = 90) -> None:
        """Until the readiness probe succeeds (as the kubelet's, every few seconds here every half)."""
        def ready() -> bool:
            if self.exited():
                raise AssertionError(f"{self.name} exited ({self.proc.returncode}):\n{self.log()[-4000:]}")
            return self.probe("readinessProbe") == 0
        try:
            wait_for(f"{self.name} to be ready", ready, timeout=timeout, interval=0.5)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{self.log()[-4000:]}") from None

    def psql(self, sql: str, db: str = "postgres", user: str = "postgres", password: str | None = None,
             background: bool = False) -> Any:
        """SQL over TCP as a client in another pod would send it (scram-sha-256, the pg_hba.conf shipped)."""
        env = {"PATH": self.db.node.path, "LANG": "C.UTF-8", "HOME": str(self.root),
               "PGPASSWORD": password if password is not None else self.db.secrets["superuser-password"]}
        argv = self.user.argv(env, ["psql", "-X", "-A", "-t", "-q", "-w", "-v", "ON_ERROR_STOP=1", "-h", "127.0.0.1",
                                    "-p", str(self.port), "-U", user, "-d", db, "-c", sql])
        if background:
            return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)

    def sql(self, sql: str, db: str = "postgres", **kw: Any) -> str:
        proc = self.psql(sql, db, **kw)
        if proc.returncode != 0:
            raise AssertionError(f"psql on {self.name} failed: {proc.stderr.strip()}")
        return proc.stdout.strip()


class Loopback:
    def __init__(self, root: Path, server_bin: Path, client_bin: Path, uid: int, gid: int) -> None:
        self.root, self.uid, self.gid = root, uid, gid
        # the image's PATH: the major's bin directory first
        self.path = f"{server_bin}:{client_bin}:/usr/bin:/bin"
        self.procs: list[subprocess.Popen[bytes]] = []
        self.inits: list[int] = []  # host pids of the containers' PID 1

    def database(self, name: str, replicas: int = 1, secrets: dict[str, str] | None = None,
                 job_vars: dict[str, Any] | None = None, lease_term: int | None = None, **spec: Any) -> Database:
        """A SampleDB's manifests, rendered: one rendering per server pod (its port and socket directory), and the
        Jobs' (with `job_vars`, the facts the roles set before rendering them). The Lease agent sidecar does not run
        here (it reads the API): with `lease_term`, the primary's term is enforced and the test writes what the
        agent would (`Pod.lease`); without, the servers are rendered without the agent."""
        secrets = secrets or {"username": "app", "password": f"app pw '{name}'",
                              "superuser-password": f"super \"pw\" '{name}'",
                              "replication-password": f"repl pw '{name}'"}
        db = Database(self, name, secrets)
        if lease_term is not None:
            spec["failover"] = {**spec.get("failover", {}), "termSeconds": lease_term}
        base = {**sampledb_vars(name, replicas=replicas, **spec), "postgres_uid": self.uid, "postgres_gid": self.gid,
                "lease_agent_enabled": lease_term is not None}
        version = base["version"]
        job_vars = {  # what the backup, restore and upgrade roles set before they render their Jobs
            "db_version": version, "backup_name": f"{name}-backup", "backup_job_name": f"{name}-backup", "backup_uid": "uid",
            "backup_pruned": [],
            "restore_claim": f"{name}-backups", "restore_path": f"{name}/{name}-backup.sql.gz",
            "upgrade_image": f"docker.io/library/postgres:{version}", "job_name": f"{name}-migrate",
            "job_command": ["/bin/bash", "/etc/sampledb/migrate.sh", "dump", f"/backups/{name}/migrate.sql.gz"],
            **(job_vars or {})}
        ports = [free_port() for _ in range(replicas)]
        variants = [(SERVER_TEMPLATES, {**base, "postgres_port": port,
                                        "postgres_socket_dir": str(self.root / f"{name}-{i}" / "run")})
                    for i, port in enumerate(ports)]
        variants.append((JOB_TEMPLATES, {**base, **job_vars}))
        *servers, jobs = render(*variants)
        names = [f"{name}-{i}" for i in range(replicas)]
        sync = replicas > 1 and (spec.get("replication") or {}).get("mode", "sync") == "sync"
        for i, (port, manifests) in enumerate(zip(ports, servers, strict=True)):
            # what the operator's leader role annotates each server with; the first one is told to initialise the
            # database (a new SampleDB)
            annotations = {"servers": ",".join(names), "synchronous-standby-names": sync_names(names) if sync else ""}
            if i == 0:
                annotations["bootstrap"] = "initdb"
            db.pods.append(Pod(db, names[i], port, self.root / names[i], manifests, annotations=annotations))
        db.jobs = jobs
        return db

    def close(self) -> None:
        # SIGKILL to a container's PID 1 kills every process of its PID namespace. (unshare --kill-child is no
        # help here: setpriv's change of uid clears the parent-death signal it relies on.)
        for p, init in zip(self.procs, self.inits, strict=True):
            if p.poll() is None and init:
                try:
                    os.kill(init, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        for p in self.procs:
            if p.poll() is None:
                p.kill()
        for p in self.procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                pass
