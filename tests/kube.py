"""Helpers for tests that talk to a real Kubernetes API."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import yaml
from kubernetes import client, config

T = TypeVar("T")


@dataclass
class Kube:
    """A cluster the tests use: its kubeconfig and API clients built from it."""

    kubeconfig: Path
    kubectl_path: str
    api: client.ApiClient = field(init=False)

    def __post_init__(self) -> None:
        self.api = config.new_client_from_config(config_file=str(self.kubeconfig))

    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api)

    @property
    def apps(self) -> client.AppsV1Api:
        return client.AppsV1Api(self.api)

    @property
    def batch(self) -> client.BatchV1Api:
        return client.BatchV1Api(self.api)

    @property
    def custom(self) -> client.CustomObjectsApi:
        return client.CustomObjectsApi(self.api)

    @property
    def ext(self) -> client.ApiextensionsV1Api:
        return client.ApiextensionsV1Api(self.api)

    @property
    def rbac(self) -> client.RbacAuthorizationV1Api:
        return client.RbacAuthorizationV1Api(self.api)

    @property
    def coordination(self) -> client.CoordinationV1Api:
        return client.CoordinationV1Api(self.api)

    def kubectl(self, *args: str, input: str | None = None, check: bool = True,
                timeout: float = 120) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run([self.kubectl_path, f"--kubeconfig={self.kubeconfig}", *args],
                              input=input, capture_output=True, text=True, timeout=timeout)
        if check and proc.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed ({proc.returncode}): {proc.stderr}")
        return proc

    def wait_established(self, *crds: str, timeout: float = 60) -> None:
        """Until each CustomResourceDefinition (by name) is Established. (kubectl wait fails at once on a CRD whose
        status the API server has not written yet, instead of waiting for it.)"""
        def established(name: str) -> bool:
            conditions = (self.ext.read_custom_resource_definition(name).status.conditions or [])
            return any(c.type == "Established" and c.status == "True" for c in conditions)
        for name in crds:
            wait_for(f"CRD {name} Established", lambda n=name: established(n), timeout=timeout, interval=0.5)

    def env(self) -> dict[str, str]:
        """Environment for child processes (the operator, ansible) that should use this cluster."""
        env = dict(os.environ)
        env["KUBECONFIG"] = str(self.kubeconfig)
        env["K8S_AUTH_KUBECONFIG"] = str(self.kubeconfig)
        env["PATH"] = f"{Path(self.kubectl_path).parent}:{env.get('PATH', '')}"
        return env


def gone(read: Callable[[], object]) -> bool:
    """Whether reading the object answers 404."""
    try:
        read()
    except client.ApiException as exc:
        return exc.status == 404
    return False


def wait_for(what: str, fn: Callable[[], T | None], timeout: float = 60.0, interval: float = 0.25) -> T:
    """Polls ``fn`` until it returns something truthy; fails with ``what`` and the last value/error."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        try:
            value = fn()
            if value:
                return value
            last = value
        except AssertionError:
            raise
        except Exception as exc:  # the API may briefly refuse while things settle
            last = exc
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}; last: {last!r}")
        time.sleep(interval)


TEST_NAMESPACE_LABEL = "playbook-operator.test/namespace"
TEST_NAMESPACE_PID = "playbook-operator.test/pid"


def remove_stale_test_namespaces(kubeconfig: Path, older_than: float = 600, timeout: float = 180) -> list[str]:
    """Deletes the test namespaces a killed session left on a local cluster (its etcd outlives the session),
    whose servers would otherwise hold the node's CPU and leave this session's pods Pending. Only those older
    than ``older_than`` seconds whose test process is gone: a session running beside this one keeps its own. Their
    custom objects' finalizers are dropped first: the operators that would honour them are gone."""
    api = config.new_client_from_config(config_file=str(kubeconfig))
    core = client.CoreV1Api(api)
    now = time.time()
    stale = [ns.metadata.name for ns in core.list_namespace(label_selector=TEST_NAMESPACE_LABEL).items
             if now - ns.metadata.creation_timestamp.timestamp() > older_than and not _owner_alive(ns)]
    if not stale:
        return []
    drop_finalizers(api, stale)
    for ns in stale:
        try:
            core.delete_namespace(ns, propagation_policy="Background")
        except client.ApiException as e:
            if e.status != 404:
                raise
    wait_for(f"the stale test namespaces {stale} to go", lambda: not [
        ns for ns in core.list_namespace(label_selector=TEST_NAMESPACE_LABEL).items if ns.metadata.name in stale],
        timeout=timeout, interval=1)
    return stale


def _owner_alive(namespace: client.V1Namespace) -> bool:
    """Whether the test process that made the namespace still runs (the local clusters are on this machine)."""
    pid = ((namespace.metadata.annotations or {}).get(TEST_NAMESPACE_PID) or "")
    if not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def drop_finalizers(api: client.ApiClient, namespaces: list[str]) -> None:
    """Drops the finalizers of every custom object in these namespaces: for objects whose operator is gone."""
    custom = client.CustomObjectsApi(api)
    kinds = [(crd.spec.group, next(v.name for v in crd.spec.versions if v.storage), crd.spec.names.plural)
             for crd in client.ApiextensionsV1Api(api).list_custom_resource_definition().items
             if crd.spec.scope == "Namespaced"]
    for namespace in namespaces:
        for group, version, plural in kinds:
            for obj in custom.list_namespaced_custom_object(group, version, namespace, plural)["items"]:
                if obj["metadata"].get("finalizers"):
                    custom.patch_namespaced_custom_object(group, version, namespace, plural,
                                                          obj["metadata"]["name"], {"metadata": {"finalizers": None}})


def fresh_namespace(kube: Kube, test_name: str) -> Iterator[str]:
    """A new namespace named after the test, deleted (in the background) when the generator resumes."""
    base = test_name.split("[")[0].lower().replace("_", "-").removeprefix("test-")[:40].strip("-")
    name = f"t-{base}-{uuid.uuid4().hex[:6]}"
    kube.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(
        name=name, labels={TEST_NAMESPACE_LABEL: "true"}, annotations={TEST_NAMESPACE_PID: str(os.getpid())})))
    # Pods are refused until the ServiceAccount controller has made the namespace's "default" account.
    wait_for(f"the ServiceAccount default in {name}",
             lambda: kube.core.read_namespaced_service_account("default", name), timeout=60)
    try:
        yield name
    finally:
        try:
            kube.core.delete_namespace(name, propagation_policy="Background")
        except client.ApiException as exc:
            if exc.status != 404:
                raise


def print_restarted_containers(kube: Kube, namespace: str, tail: int = 40) -> None:
    """For a failed test's report: each container that restarted, why it last ended and the end of its log then."""
    for pod in kube.core.list_namespaced_pod(namespace).items:
        for status in (pod.status.init_container_statuses or []) + (pod.status.container_statuses or []):
            ended = status.last_state.terminated if status.last_state else None
            if not status.restart_count or ended is None:
                continue
            print(f"\n--- {pod.metadata.name}/{status.name}: {status.restart_count} restarts; last ended "
                  f"{ended.finished_at} with {ended.exit_code} ({ended.reason}) ---")
            try:
                print(kube.core.read_namespaced_pod_log(pod.metadata.name, namespace, container=status.name,
                                                       previous=True, tail_lines=tail))
            except client.ApiException as exc:
                print(f"(no earlier log: {exc.reason})")


def containers_digest(kube: Kube, namespace: str, instance: str | None = None, tail: int = 8) -> str:
    """For a failed wait's message (the part of a CI log that is always shown): each server container's state,
    restarts and the end of its log, in a few lines."""
    selector = f"app.kubernetes.io/instance={instance}" if instance else None
    out = []
    try:
        for pod in kube.core.list_namespaced_pod(namespace, label_selector=selector).items:
            if not pod.status.container_statuses:  # (not started: unscheduled, say, and why)
                why = "; ".join(f"{c.type}={c.status} {c.reason or ''} {c.message or ''}".strip()
                                for c in pod.status.conditions or [] if c.status != "True")
                out.append(f"[{pod.metadata.name}: {pod.status.phase}{', ' + why if why else ''}]")
            for status in pod.status.container_statuses or []:
                ended = status.last_state.terminated if status.last_state else None
                state = next((k for k in ("running", "waiting", "terminated") if getattr(status.state, k)), "?")
                out.append(f"[{pod.metadata.name}/{status.name}: {state}, ready={status.ready}, "
                           f"{status.restart_count} restarts" + (f", last exit {ended.exit_code} at "
                                                                 f"{ended.finished_at:%H:%M:%S}" if ended else "") + "]")
                try:
                    log = kube.core.read_namespaced_pod_log(pod.metadata.name, namespace, container=status.name,
                                                            tail_lines=tail)
                except client.ApiException as exc:
                    log = f"(no log: {exc.reason})"
                out.extend(f"  {line[:220]}" for line in log.splitlines())
    except Exception as exc:  # (the digest must never hide the failure it explains)
        out.append(f"(the containers could not be read: {exc})")
    return "\n".join(out)


@contextmanager
def explained_by_containers(kube: Kube, namespace: str, instance: str | None = None) -> Iterator[None]:
    """A wait that fails inside says, in its message, what the servers' containers were doing."""
    try:
        yield
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{containers_digest(kube, namespace, instance)}") from None


def find_kubectl() -> str:
    found = shutil.which("kubectl")
    if not found:
        raise RuntimeError("kubectl not found on PATH; with KUBECONFIG set the tests use the kubectl on PATH")
    return found


@dataclass
class ServiceAccountAccess:
    """A ServiceAccount of a test and what it may do: cluster-wide rules granted and revoked by name, a
    kubeconfig with its token (for an operator that must run as it, not as the admin)."""

    kube: Kube
    namespace: str
    name: str
    kubeconfig: Path
    _granted: set[str] = field(default_factory=set)

    def _object_name(self, grant: str) -> str:
        return f"{self.namespace}-{self.name}-{grant}"

    def create(self) -> ServiceAccountAccess:
        self.kube.core.create_namespaced_service_account(self.namespace, {"metadata": {"name": self.name}})
        token = self.kube.kubectl("-n", self.namespace, "create", "token", self.name, "--duration", "1h").stdout.strip()
        admin = yaml.safe_load(self.kube.kubeconfig.read_text())
        cluster = admin["clusters"][0]
        self.kubeconfig.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "clusters": [cluster],
            "users": [{"name": self.name, "user": {"token": token}}],
            "contexts": [{"name": self.name, "context": {"cluster": cluster["name"], "user": self.name,
                                                          "namespace": self.namespace}}],
            "current-context": self.name}))
        return self

    def grant(self, grant: str, rules: list[dict[str, Any]]) -> None:
        name = self._object_name(grant)
        self.kube.rbac.create_cluster_role({"metadata": {"name": name}, "rules": rules})
        self.kube.rbac.create_cluster_role_binding({
            "metadata": {"name": name}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                                    "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": self.name, "namespace": self.namespace}]})
        self._granted.add(grant)

    def revoke(self, grant: str) -> None:
        name = self._object_name(grant)
        for delete in (self.kube.rbac.delete_cluster_role_binding, self.kube.rbac.delete_cluster_role):
            try:
                delete(name)
            except client.ApiException as exc:
                if exc.status != 404:
                    raise
        self._granted.discard(grant)

    def env(self) -> dict[str, str]:
        return {"KUBECONFIG": str(self.kubeconfig), "K8S_AUTH_KUBECONFIG": str(self.kubeconfig)}

    def remove(self) -> None:
        for grant in list(self._granted):
            self.revoke(grant)
