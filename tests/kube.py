"""Helpers for tests that talk to a real Kubernetes API."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

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

    def env(self) -> dict[str, str]:
        """Environment for child processes (the operator, ansible) that should use this cluster."""
        env = dict(os.environ)
        env["KUBECONFIG"] = str(self.kubeconfig)
        env["K8S_AUTH_KUBECONFIG"] = str(self.kubeconfig)
        env["PATH"] = f"{Path(self.kubectl_path).parent}:{env.get('PATH', '')}"
        return env


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


def fresh_namespace(kube: Kube, test_name: str) -> Iterator[str]:
    """A new namespace named after the test, deleted (in the background) when the generator resumes."""
    base = test_name.split("[")[0].lower().replace("_", "-").removeprefix("test-")[:40].strip("-")
    name = f"t-{base}-{uuid.uuid4().hex[:6]}"
    kube.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(
        name=name, labels={"playbook-operator.test/namespace": "true"})))
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


def find_kubectl() -> str:
    found = shutil.which("kubectl")
    if not found:
        raise RuntimeError("kubectl not found on PATH; with KUBECONFIG set the tests use the kubectl on PATH")
    return found
