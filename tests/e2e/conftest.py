"""Fixtures of the e2e tier: a cluster whose pods really run (the local ``e2e`` cluster's real node, or
E2E_KUBECONFIG), a namespace per test there, and the SampleDB operator as a local process against it."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.kube import Kube, find_kubectl, fresh_namespace
from tests.operator import ROOT, OperatorProcess, install_sampledb_crds, sampledb_watches, stop_all


@pytest.fixture(scope="session")
def real() -> Kube:
    """The cluster with a real node."""
    kubeconfig = os.environ.get("E2E_KUBECONFIG") or os.environ.get("KUBECONFIG")
    if not kubeconfig:
        pytest.fail("no real-node cluster: E2E_KUBECONFIG is unset and the local cluster 'e2e' was not brought up")
    return Kube(Path(kubeconfig.split(os.pathsep)[0]), find_kubectl())


@pytest.fixture
def real_namespace(real: Kube, request: pytest.FixtureRequest) -> Iterator[str]:
    yield from fresh_namespace(real, request.node.name)


@pytest.fixture(scope="session")
def real_sampledb_crds(real: Kube) -> None:
    install_sampledb_crds(real)


@pytest.fixture
def real_sampledb_operator(real: Kube, real_namespace: str, real_sampledb_crds: None, tmp_path: Path,
                           request: pytest.FixtureRequest) -> Iterator[Callable[..., OperatorProcess]]:
    """Starts this repository's SampleDB operator (watches.yaml, roles) as a local process watching the test's
    namespace on the real-node cluster; keyword arguments become watch vars. Shows its log on failure."""
    ops: list[OperatorProcess] = []

    def start(*args: str, env: dict[str, str] | None = None, **extra_vars: object) -> OperatorProcess:
        op = OperatorProcess(real, real_namespace, tmp_path, sampledb_watches(**extra_vars),
                             ["--ansible-roles-path", str(ROOT / "roles"), *args], dict(env or {}),
                             name=f"sampledb-operator-{len(ops)}")
        ops.append(op.start())
        return op

    yield start
    stop_all(ops, request)
