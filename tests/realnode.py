"""Helpers for tests on a real node: waiting for pods, Service endpoints and SQL results, and running
psql inside server pods or from a client pod, the way a user (or an application) would reach them.

Passwords go to psql on its standard input side (an environment variable set inside the pod from a
file descriptor), never on a command line or in a log.
"""

from __future__ import annotations

import base64
import os
import shlex
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from localcluster import images
from tests.kube import Kube, explained_by_containers, wait_for
from tests.operator import ROOT
from tests.sampledb import GROUP, PLURAL, RARE_SCHEDULE, VERSION, sample, wait_phase

# The e2e tier runs in two lanes side by side on the real node (pytest-xdist groups: each on one worker, its
# modules in file order): the data-safety proofs in one, the rest in the other. tests/e2e/conftest.py keeps them
# apart where they would meet: an operator that watches every namespace, and the cluster's restart.
NODE_LANE = pytest.mark.xdist_group("e2e")
DATABASE_LANE = pytest.mark.xdist_group("e2e-db")
# the node faults, on the cluster of several nodes: nothing there is shared with the two lanes above
NODES_LANE = pytest.mark.xdist_group("e2e-nodes")
NODES_CLUSTER_NAME = "nodes"  # its local cluster: three real nodes
NODES = 3
STOP_NODES_AFTER = "PLAYBOOK_OPERATOR_STOP_NODES_AFTER"  # set when this session started that cluster

HELPER_IMAGE = "localhost/playbook-operator/helper:bookworm"
# psql and bash for client pods: the first PostgreSQL image the node has
POSTGRES_IMAGE = f"{images.POSTGRES_REPO}:{images.POSTGRES_VERSIONS[0]}"


def pod_ready(kube: Kube, namespace: str, name: str) -> bool:
    try:
        pod = kube.core.read_namespaced_pod(name, namespace)
    except client.ApiException as exc:
        if exc.status == 404:
            return False
        raise
    conds = pod.status.conditions or []
    return pod.metadata.deletion_timestamp is None and any(c.type == "Ready" and c.status == "True" for c in conds)


def wait_pod_ready(kube: Kube, namespace: str, name: str, timeout: float = 180) -> None:
    wait_for(f"pod {namespace}/{name} to be Ready", lambda: pod_ready(kube, namespace, name), timeout=timeout,
             interval=0.5)


def endpoints(kube: Kube, namespace: str, service: str) -> list[str]:
    """The ready pod names behind a Service (from its EndpointSlices)."""
    slices = client.DiscoveryV1Api(kube.api).list_namespaced_endpoint_slice(
        namespace, label_selector=f"kubernetes.io/service-name={service}").items
    return sorted(ep.target_ref.name for sl in slices for ep in sl.endpoints or []
                  if ep.conditions and ep.conditions.ready and ep.target_ref)


def wait_endpoints(kube: Kube, namespace: str, service: str, expect: list[str] | int, timeout: float = 120) -> list[str]:
    """Waits until the Service routes to exactly these pods (or to this many)."""
    def check() -> list[str] | None:
        got = endpoints(kube, namespace, service)
        ok = len(got) == expect if isinstance(expect, int) else got == sorted(expect)
        return got if ok else None

    return wait_for(f"Service {namespace}/{service} to route to {expect}", check, timeout=timeout, interval=0.5)


def psql_in_server(kube: Kube, namespace: str, pod: str, sql: str, database: str = "postgres",
                   check: bool = True) -> str:
    """Runs SQL as the superuser inside a server pod, over TCP to its own server (what the probes see)."""
    script = ('export PGPASSWORD="$POSTGRES_PASSWORD"; exec psql -X -A -t -q -v ON_ERROR_STOP=1 -h 127.0.0.1 '
              f'-U "${{POSTGRES_USER:-postgres}}" -d {shlex.quote(database)} -c {shlex.quote(sql)}')
    proc = kube.kubectl("-n", namespace, "exec", pod, "-c", "postgres", "--", "bash", "-c", script, check=False)
    if check and proc.returncode != 0:
        raise AssertionError(f"psql in {pod} failed: {proc.stderr.strip()}")
    return proc.stdout.strip()


def wait_sql(kube: Kube, namespace: str, pod: str, sql: str, expect: str, timeout: float = 120,
             database: str = "postgres") -> str:
    def check() -> str | None:
        out = psql_in_server(kube, namespace, pod, sql, database, check=False)
        return out if out == expect else None

    return wait_for(f"{sql!r} in {pod} to give {expect!r}", check, timeout=timeout, interval=1)


@dataclass(frozen=True)
class Credentials:
    """A database user and password; the password stays out of reprs (and so out of test reports)."""

    user: str
    password: str = field(repr=False)


def credentials(kube: Kube, namespace: str, database: str, user_key: str = "username",
                password_key: str = "password") -> Credentials:
    """From a SampleDB's credentials Secret, as an application would mount it."""
    data = kube.core.read_namespaced_secret(f"{database}-credentials", namespace).data
    return Credentials(base64.b64decode(data[user_key]).decode(), base64.b64decode(data[password_key]).decode())


class ClientPod:
    """A pod that only runs psql against Services, as an application in the cluster would."""

    def __init__(self, kube: Kube, namespace: str, image: str, name: str = "sql-client") -> None:
        self.kube, self.namespace, self.name = kube, namespace, name
        body: dict[str, Any] = {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"app": "sql-client"}},
            "spec": {"terminationGracePeriodSeconds": 0,
                     "securityContext": {"runAsUser": 999, "runAsGroup": 999, "runAsNonRoot": True},
                     "containers": [{"name": "client", "image": image, "command": ["sleep", "infinity"],
                                     "imagePullPolicy": "IfNotPresent"}]}}
        kube.core.create_namespaced_pod(namespace, body)
        wait_pod_ready(kube, namespace, name)

    def sql(self, host: str, creds: Credentials, database: str, sql: str,
            check: bool = True) -> tuple[int, str, str]:
        script = ('IFS= read -r PGPASSWORD; export PGPASSWORD; exec psql -X -A -t -q -v ON_ERROR_STOP=1 '
                  f'-h {shlex.quote(host)} -U {shlex.quote(creds.user)} -d {shlex.quote(database)} '
                  f'-c {shlex.quote(sql)}')
        for _ in range(3):
            proc = self.kube.kubectl("-n", self.namespace, "exec", "-i", self.name, "--", "bash", "-c", script,
                                     input=creds.password + "\n", check=False)
            # Under CI's load a lookup of a name that exists can time out in one search domain of the pod's
            # resolv.conf (ndots 5); glibc then tries the next and reports the last one's NXDOMAIN. Applications
            # retry a failed connection; so does this client, for that error only.
            if "could not translate host name" not in proc.stderr:
                break
            time.sleep(2)
        if check and proc.returncode != 0:
            raise AssertionError(f"psql -h {host} as {creds.user} failed: {proc.stderr.strip()}")
        return proc.returncode, proc.stdout.strip(), proc.stderr.strip()


def simple_pod(name: str, command: list[str], image: str = HELPER_IMAGE, **spec: object) -> dict:
    """A one-container pod that runs a command once (restartPolicy Never); the image is imported locally."""
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"terminationGracePeriodSeconds": 0, "restartPolicy": "Never",
                     "containers": [{"name": "main", "image": image, "imagePullPolicy": "IfNotPresent",
                                     "command": command}], **spec}}


def process_alive(pid: int) -> bool:
    """Running, not a zombie that its parent has yet to reap."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def process_name(pid: int) -> str:
    try:
        return os.path.basename(Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode())
    except OSError:
        return ""


# The sample's servers request 250m of CPU each; the one node has 2 cores, and two lanes of tests share it: eight
# servers would already leave one Pending (a server made again after a failover, say) until the other lane's go.
# Only the scheduler reads a request, so the proofs ask for less.
SERVER_RESOURCES = {"requests": {"cpu": "50m", "memory": "512Mi"}, "limits": {"memory": "1Gi"}}


def ready_database(kube: Kube, namespace: str, name: str, **spec: Any) -> dict:
    """deploy/samples' SampleDB with ``spec`` over it, Ready and its -primary Service routing to the primary.
    Its backup schedule never fires during a run unless ``spec`` gives one; its servers request SERVER_RESOURCES
    unless ``spec`` says otherwise."""
    kube.custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, sample(
        name, **{"backup": {"schedule": RARE_SCHEDULE}, "resources": SERVER_RESOURCES, **spec}))
    with explained_by_containers(kube, namespace, name):
        db = wait_phase(kube, namespace, name, timeout=420)
    wait_endpoints(kube, namespace, f"{name}-primary", [db["status"]["currentPrimary"]])
    return db


# Faults of a server: the pod deleted; its postmaster killed (the container restarts); or frozen (SIGSTOP: a hung
# server, unready and deaf to its new label).
def delete_pod(kube: Kube, namespace: str, pod: str) -> None:
    kube.core.delete_namespaced_pod(pod, namespace)


def signal_in_server(kube: Kube, namespace: str, pod: str, signal: str, pid: str) -> None:
    """kill -SIGNAL PID in the server container (PID as the shell expands it there)."""
    kube.kubectl("-n", namespace, "exec", pod, "-c", "postgres", "--", "bash", "-c", f"kill -{signal} {pid}")


def _signal_postmaster(kube: Kube, namespace: str, pod: str, signal: str) -> None:
    signal_in_server(kube, namespace, pod, signal, '"$(head -1 "$PGDATA/postmaster.pid")"')


def kill_postmaster(kube: Kube, namespace: str, pod: str) -> None:
    _signal_postmaster(kube, namespace, pod, "KILL")


def freeze_postmaster(kube: Kube, namespace: str, pod: str) -> None:
    _signal_postmaster(kube, namespace, pod, "STOP")


def thaw_postmaster(kube: Kube, namespace: str, pod: str) -> None:
    _signal_postmaster(kube, namespace, pod, "CONT")


# The operator as `make deploy` runs it: deploy/rbac's ServiceAccount, leader election in its namespace, the
# production retry backoff and the roles' defaults (tests.operator.sampledb_watches shortens those for kwok's tests).
OPERATOR_NAMESPACE = "sampledb-system"
SERVICE_ACCOUNT = "sampledb-operator"
AS_DEPLOYED_VARS = {"progress_requeue": "5s", "health_requeue": "3s", "final_backup_requeue": "5s",
                    "pod_extra_annotations": {}, "backup_pod_extra_annotations": {}}


def as_deployed_args(lease: str) -> list[str]:
    return ["--retry-backoff-max", "5m", "--leader-elect", "--leader-election-id", lease,
            "--leader-election-namespace", OPERATOR_NAMESPACE,
            "--required-permissions", str(ROOT / "deploy" / "rbac" / "role.yaml")]


def deployed_credentials(kube: Kube, path: Path) -> Path:
    """deploy/rbac as `make deploy` applies it, and at ``path`` a kubeconfig with its ServiceAccount's token: the
    credentials the operator's pod has (never the admin's)."""
    kube.kubectl("create", "namespace", OPERATOR_NAMESPACE, check=False)
    kube.kubectl("apply", "--server-side", "--force-conflicts", "-n", OPERATOR_NAMESPACE, "-k",
                 str(ROOT / "deploy" / "rbac"))
    token = kube.kubectl("-n", OPERATOR_NAMESPACE, "create", "token", SERVICE_ACCOUNT, "--duration=12h").stdout.strip()
    admin = yaml.safe_load(kube.kubeconfig.read_text())
    current = next(x for x in admin["contexts"] if x["name"] == admin["current-context"])["context"]["cluster"]
    cluster = next(c for c in admin["clusters"] if c["name"] == current)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "clusters": [cluster],
        "users": [{"name": SERVICE_ACCOUNT, "user": {"token": token}}],
        "contexts": [{"name": "sa", "context": {"cluster": cluster["name"], "user": SERVICE_ACCOUNT}}],
        "current-context": "sa"}))
    path.chmod(0o600)
    return path


def pod_host_pid(kube: Kube, namespace: str, pod: str) -> int:
    """A host pid of one of the pod's processes (its sandbox's, or any container's: all share its network
    namespace), found by the pod's UID in the process's cgroup."""
    uid = kube.core.read_namespaced_pod(pod, namespace).metadata.uid
    keys = (f"pod{uid}", f"pod{uid.replace('-', '_')}")
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if any(k in (proc / "cgroup").read_text() for k in keys):
                    return int(proc.name)
            except OSError:
                continue
    raise AssertionError(f"no process of pod {namespace}/{pod} (uid {uid}) on this machine")


@contextmanager
def cut_off_from_the_api_server(kube: Kube, namespace: str, pod: str) -> Iterator[None]:
    """The pod's traffic to the API server (the kubernetes Service's address, as pods reach it) is dropped, in the
    pod's own network namespace, until the block ends; its other traffic (the replicas, the clients) flows."""
    api = kube.core.read_namespaced_service("kubernetes", "default").spec.cluster_ip
    rule = ["OUTPUT", "-d", f"{api}/32", "-j", "DROP"]

    def iptables(*args: str) -> None:
        pid = pod_host_pid(kube, namespace, pod)
        subprocess.run(["nsenter", "-t", str(pid), "-n", "iptables", "-w", *args, *rule], check=True,
                       capture_output=True, text=True, timeout=30)
    iptables("-I")
    try:
        yield
    finally:
        iptables("-D")
