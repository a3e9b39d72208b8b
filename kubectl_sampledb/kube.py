"""The cluster as kubectl would reach it (the user's kubeconfig, context and namespace), and every API call
the plugin makes, each turning the API's refusals into errors that name what was refused."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import urllib3
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException

from . import (
    BACKUP_RESOURCE,
    BACKUPS,
    GROUP,
    ROLE_LABEL,
    SAMPLEDB_RESOURCE,
    SAMPLEDBS,
    SERVER_CONTAINER,
    VERSION,
    server_selector,
)
from .errors import AlreadyExists, CliError, Forbidden, NotFound, server_message, user_in

IN_CLUSTER_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


@dataclass(frozen=True)
class Target:
    """The user's choice of cluster, as given to kubectl; psql hands the same flags on to kubectl."""

    namespace: str
    kubeconfig: str | None = None
    context: str | None = None

    def kubectl_flags(self) -> list[str]:
        flags = [f"--kubeconfig={self.kubeconfig}"] if self.kubeconfig else []
        flags += [f"--context={self.context}"] if self.context else []
        return [*flags, "-n", self.namespace]


@dataclass
class ExecResult:
    """A command run in a server container: rc None when it had not finished within the time allowed."""

    rc: int | None
    stdout: str
    stderr: str


class ExecError(Exception):
    """The command could not be run at all (refused, no such pod, no connection): the reason, for the user."""


Executor = Callable[[str, list[str], float], ExecResult]  # (pod, command, timeout) in the server container


@dataclass
class Cluster:
    """The API clients of one namespace. Tests pass fakes of the kubernetes client objects and of exec."""

    target: Target
    core: Any
    custom: Any
    discovery: Any
    coordination: Any
    executor: Executor
    host: str = ""

    @property
    def namespace(self) -> str:
        return self.target.namespace

    def call(self, verb: str, resource: str, fn: Callable[..., Any], *args: Any, kind: str = "",
             name: str = "", **kwargs: Any) -> Any:
        """One API call; a 404 names the object (kind, name), a 403 the verb and resource."""
        try:
            return fn(*args, **kwargs)
        except ApiException as exc:
            raise api_error(exc, verb, resource, self.namespace, kind, name) from None
        except urllib3.exceptions.HTTPError as exc:
            raise CliError(f"cannot reach the API server {self.host}: {getattr(exc, 'reason', None) or exc}") from None

    # SampleDB and SampleDBBackup

    def sampledb(self, name: str) -> dict[str, Any]:
        return self.call("get", SAMPLEDB_RESOURCE, self.custom.get_namespaced_custom_object, GROUP, VERSION,
                         self.namespace, SAMPLEDBS, name, kind="sampledb", name=name)

    def backup(self, name: str) -> dict[str, Any]:
        return self.call("get", BACKUP_RESOURCE, self.custom.get_namespaced_custom_object, GROUP, VERSION,
                         self.namespace, BACKUPS, name, kind="sampledbbackup", name=name)

    def backups_of(self, database: str) -> list[dict[str, Any]]:
        """The database's SampleDBBackups: the backup role labels none, so by spec.database."""
        items = self.call("list", BACKUP_RESOURCE, self.custom.list_namespaced_custom_object, GROUP, VERSION,
                          self.namespace, BACKUPS)["items"]
        return [b for b in items if (b.get("spec") or {}).get("database") == database]

    def create_backup(self, body: dict[str, Any]) -> dict[str, Any]:
        return self.call("create", BACKUP_RESOURCE, self.custom.create_namespaced_custom_object, GROUP, VERSION,
                         self.namespace, BACKUPS, body, kind="sampledbbackup", name=body["metadata"]["name"])

    def create_sampledb(self, body: dict[str, Any]) -> dict[str, Any]:
        return self.call("create", SAMPLEDB_RESOURCE, self.custom.create_namespaced_custom_object, GROUP, VERSION,
                         self.namespace, SAMPLEDBS, body, kind="sampledb", name=body["metadata"]["name"])

    def patch_sampledb(self, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        return self.call("patch", SAMPLEDB_RESOURCE, self.custom.patch_namespaced_custom_object, GROUP, VERSION,
                         self.namespace, SAMPLEDBS, name, patch, kind="sampledb", name=name)

    # What the SampleDB is made of

    def server_pods(self, name: str) -> list[Any]:
        pods = self.call("list", "pods", self.core.list_namespaced_pod, self.namespace,
                         label_selector=server_selector(name)).items
        return sorted(pods, key=lambda p: _ordinal_key(p.metadata.name))

    def ready_endpoints(self, service: str) -> list[str]:
        """The pods a Service routes to now (ready endpoints of its EndpointSlices)."""
        slices = self.call("list", "endpointslices.discovery.k8s.io", self.discovery.list_namespaced_endpoint_slice,
                           self.namespace, label_selector=f"kubernetes.io/service-name={service}").items
        return sorted({ep.target_ref.name for sl in slices for ep in sl.endpoints or []
                       if ep.target_ref and ep.conditions and ep.conditions.ready})

    def lease(self, name: str) -> Any | None:
        try:
            return self.call("get", "leases.coordination.k8s.io", self.coordination.read_namespaced_lease, name,
                             self.namespace, kind="lease", name=name)
        except NotFound:
            return None

    def events_about(self, name: str) -> list[Any]:
        """The Events about the SampleDB."""
        return self.call("list", "events", self.core.list_namespaced_event, self.namespace,
                         field_selector=f"involvedObject.kind=SampleDB,involvedObject.name={name}").items

    def pod_log(self, pod: str, **kwargs: Any) -> Any:
        return self.call("get", "pods/log", self.core.read_namespaced_pod_log, pod, self.namespace,
                         container=SERVER_CONTAINER, kind="pod", name=pod, **kwargs)

    def exec(self, pod: str, command: list[str], timeout: float) -> ExecResult:
        return self.executor(pod, command, timeout)


def pod_role(pod: Any) -> str:
    """primary | replica, as the leader role labelled the pod; "" before it has."""
    return (pod.metadata.labels or {}).get(ROLE_LABEL, "")


def pod_ready(pod: Any) -> bool:
    """Ready, and not on its way out (a terminating pod can still report Ready)."""
    conditions = (pod.status.conditions if pod.status else None) or []
    return pod.metadata.deletion_timestamp is None and any(c.type == "Ready" and c.status == "True"
                                                           for c in conditions)


def _ordinal_key(pod_name: str) -> tuple[str, int]:
    """inventory-10 after inventory-9."""
    base, _, ordinal = pod_name.rpartition("-")
    return (base, int(ordinal)) if ordinal.isdigit() else (pod_name, -1)


def api_error(exc: ApiException, verb: str, resource: str, namespace: str, kind: str, name: str) -> CliError:
    message = server_message(exc.body)
    if exc.status == 404 and kind and name:
        return NotFound(kind, name, namespace)
    if exc.status == 403:
        return Forbidden(verb, resource, namespace, user_in(message))
    if exc.status == 409 and verb == "create" and kind:
        return AlreadyExists(kind, name, namespace)
    if exc.status == 401:
        return CliError("unauthorized: the API server did not accept this kubeconfig's credentials")
    what = f"{verb} {resource}" + (f" {name}" if name else "")
    return CliError(f"{what}: {message or exc.reason or 'error'} ({exc.status})")


def exec_refusal(exc: ApiException, pod: str, namespace: str) -> str:
    """Why an exec was refused. The websocket client reports the handshake's HTTP status in its reason
    ("Handshake status 403 Forbidden ..."), with status 0."""
    status = exc.status
    found = re.search(r"Handshake status (\d{3})", str(exc.reason or ""))
    if found:
        status = int(found.group(1))
    if status == 403:
        return str(Forbidden("create", "pods/exec", namespace, user_in(str(exc.reason) + server_message(exc.body))))
    if status == 404:
        return f"pod {pod} not found"
    reason = str(exc.reason or "").split(" -+-+- ")[0].strip()
    return f"exec failed: {reason or status}"


def stream_executor(cfg: client.Configuration, namespace: str) -> Executor:
    """Exec over the API server's websocket, as kubectl exec does, without a terminal. Each exec has its own
    ApiClient: kubernetes.stream swaps the client's call_api while it runs, which concurrent execs (one per
    server) would otherwise undo for each other."""
    from kubernetes.stream import stream

    def run(pod: str, command: list[str], timeout: float) -> ExecResult:
        core = client.CoreV1Api(client.ApiClient(cfg))
        try:
            ws = stream(core.connect_get_namespaced_pod_exec, pod, namespace, container=SERVER_CONTAINER,
                        command=command, stdin=False, stdout=True, stderr=True, tty=False, _preload_content=False)
        except ApiException as exc:
            raise ExecError(exec_refusal(exc, pod, namespace)) from None
        except Exception as exc:  # the websocket library's own errors (a reset connection, TLS)
            raise ExecError(f"exec failed: {exc}") from None
        try:
            ws.run_forever(timeout=timeout)
            finished = not ws.is_open()  # as run_forever left it: the reads below may take in more frames
            out, err = ws.read_stdout(timeout=0) or "", ws.read_stderr(timeout=0) or ""
            if not finished:
                return ExecResult(None, out, err)
            try:
                rc = ws.returncode
            except (TypeError, KeyError, IndexError, ValueError):  # no status on the error channel
                rc = 0 if out and not err else 1
            return ExecResult(rc, out, err)
        finally:
            ws.close()

    return run


def _context_namespace(kubeconfig: str | None, context: str | None) -> str | None:
    contexts, active = config.list_kube_config_contexts(config_file=kubeconfig)
    wanted = context or (active or {}).get("name")
    for ctx in contexts or []:
        if ctx.get("name") == wanted:
            return (ctx.get("context") or {}).get("namespace") or None
    return None


def _has_kubeconfig(kubeconfig: str | None) -> bool:
    if kubeconfig:
        return True
    paths = os.environ.get("KUBECONFIG") or str(Path.home() / ".kube" / "config")
    return any(Path(p).expanduser().exists() for p in paths.split(os.pathsep) if p)


def connect(kubeconfig: str | None = None, context: str | None = None, namespace: str | None = None) -> Cluster:
    """Like kubectl: --kubeconfig, else KUBECONFIG (a list of files), else ~/.kube/config, else the pod's
    ServiceAccount; the namespace from -n, else the context's, else "default"."""
    cfg = client.Configuration()
    try:
        if not _has_kubeconfig(kubeconfig) and not context and os.environ.get("KUBERNETES_SERVICE_HOST"):
            config.load_incluster_config(client_configuration=cfg)
            ns = namespace or (IN_CLUSTER_NAMESPACE.read_text().strip() if IN_CLUSTER_NAMESPACE.exists() else None)
        else:
            config.load_kube_config(config_file=kubeconfig, context=context, client_configuration=cfg,
                                    persist_config=False)
            ns = namespace or _context_namespace(kubeconfig, context)
    except (ConfigException, OSError) as exc:
        raise CliError(f"kubeconfig: {exc}") from None
    api = client.ApiClient(cfg)
    core = client.CoreV1Api(api)
    target = Target(ns or "default", kubeconfig, context)
    return Cluster(target=target, core=core, custom=client.CustomObjectsApi(api),
                   discovery=client.DiscoveryV1Api(api), coordination=client.CoordinationV1Api(api),
                   executor=stream_executor(cfg, target.namespace), host=cfg.host)
