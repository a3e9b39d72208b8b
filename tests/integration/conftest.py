"""Fixtures for tests that run the operator against the real cluster."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.apiproxy import ApiProxy
from tests.kube import Kube, ServiceAccountAccess, wait_for
from tests.operator import (
    ROOT,
    TESTOP,
    OperatorProcess,
    Widgets,
    install_sampledb_crds,
    sampledb_watches,
    stop_all,
)


@pytest.fixture(scope="session")
def widget_crd(kube: Kube) -> str:
    crd = yaml.safe_load((TESTOP / "crd.yaml").read_text())
    kube.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(TESTOP / "crd.yaml"))
    name = crd["metadata"]["name"]
    wait_for("the Widget CRD to be established", lambda: any(
        c.type == "Established" and c.status == "True"
        for c in (kube.ext.read_custom_resource_definition(name).status.conditions or [])))
    wait_for("widgets to be served", lambda: kube.kubectl("get", "widgets.test.playbook-operator.dev", "-A", check=False).returncode == 0)
    return name


@pytest.fixture
def widgets(kube: Kube, namespace: str, widget_crd: str) -> Widgets:
    return Widgets(kube, namespace)


@pytest.fixture
def start_operator(kube: Kube, namespace: str, widget_crd: str, tmp_path: Path,
                   request: pytest.FixtureRequest) -> Iterator[Callable[..., OperatorProcess]]:
    """Starts operator processes watching the test's namespace; stops them (and shows their logs on failure)."""
    started: list[OperatorProcess] = []

    def start(watches: list[dict[str, Any]], *args: str, wait: bool = True, name: str = "operator",
              env: dict[str, str] | None = None) -> OperatorProcess:
        op = OperatorProcess(kube, namespace, tmp_path, watches, list(args), dict(env or {}), name=name)
        started.append(op)
        return op.start(wait=wait)

    yield start
    stop_all(started, request)


@pytest.fixture(scope="session")
def sampledb_crds(kube: Kube) -> None:
    install_sampledb_crds(kube)


@pytest.fixture
def sampledb_operators(kube: Kube, namespace: str, sampledb_crds: None, tmp_path: Path,
                       request: pytest.FixtureRequest) -> Iterator[Callable[..., OperatorProcess]]:
    """Starts the SampleDB operator (this repository's watches.yaml and roles) on the test's namespace, with
    kwok's stage delays shortened for the database pods and every Job; keyword arguments become watch vars
    of every kind (a role's knobs), ``watch_nodes`` adds its watch of Nodes. Stops it afterwards and shows its log if the test failed."""
    ops: list[OperatorProcess] = []

    def start(*args: str, env: dict[str, str] | None = None, watch_nodes: bool = False,
              **extra_vars: object) -> OperatorProcess:
        op = OperatorProcess(kube, namespace, tmp_path, sampledb_watches(nodes=watch_nodes, **extra_vars),
                             ["--ansible-roles-path", str(ROOT / "roles"), *args], dict(env or {}),
                             name=f"sampledb-operator-{len(ops)}")
        ops.append(op.start())
        return op

    yield start
    stop_all(ops, request)


@pytest.fixture
def service_account(kube: Kube, namespace: str, tmp_path: Path) -> Iterator[ServiceAccountAccess]:
    """A ServiceAccount in the test's namespace with nothing granted yet; its grants go with the test."""
    account = ServiceAccountAccess(kube, namespace, "operator", tmp_path / "sa-kubeconfig").create()
    yield account
    account.remove()



@pytest.fixture
def api_proxy(kube: Kube, tmp_path: Path) -> Iterator[ApiProxy]:
    """A recording, fault-injecting proxy in front of the API server; an operator started with its
    ``env()`` reaches the API server only through it."""
    proxy = ApiProxy(kube.kubeconfig).start(tmp_path / "proxy-kubeconfig")
    yield proxy
    proxy.stop()
