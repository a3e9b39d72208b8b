"""The test harness: one real cluster per test session, one namespace per test.

With KUBECONFIG set, tests use that cluster (kind, k3d, a real one). Without it, the local control
plane named ``test`` is brought up (built the first time) and stopped again at the end of the session
if this session started it (set PLAYBOOK_OPERATOR_KEEP_CLUSTER=1 to keep it for the next run).
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from tests.kube import Kube, find_kubectl

LOCAL_CLUSTER_NAME = "test"


def _is_xdist_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def pytest_configure(config: pytest.Config) -> None:
    config._suite_start = time.monotonic()  # type: ignore[attr-defined]
    if _is_xdist_worker(config) or os.environ.get("KUBECONFIG"):
        return
    # Bring the local cluster up once, in the controlling process, before any xdist worker starts;
    # workers inherit KUBECONFIG. Only sessions that select cluster tests pay for it.
    if not _wants_cluster(config):
        return
    from localcluster.build import binary
    from localcluster.cluster import LocalCluster

    cluster = LocalCluster(LOCAL_CLUSTER_NAME)
    config._started_cluster = not cluster.running()  # type: ignore[attr-defined]
    took = cluster.up()
    print(f"\nlocal cluster {LOCAL_CLUSTER_NAME!r} ready in {took:.1f} s ({cluster.paths.root})")
    os.environ["KUBECONFIG"] = str(cluster.paths.kubeconfig)
    os.environ["PATH"] = f"{binary('kubectl').parent}:{os.environ['PATH']}"


def _wants_cluster(config: pytest.Config) -> bool:
    markexpr = config.getoption("markexpr", "") or ""
    return "not cluster" not in markexpr


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # tests/integration talks to a real cluster (unit tests use fakes; script tests use real PostgreSQL).
    for item in items:
        if "/tests/integration/" in str(item.path):
            item.add_marker(pytest.mark.cluster)


def pytest_unconfigure(config: pytest.Config) -> None:
    if _is_xdist_worker(config):
        return
    if getattr(config, "_started_cluster", False) and not os.environ.get("PLAYBOOK_OPERATOR_KEEP_CLUSTER"):
        from localcluster.cluster import LocalCluster

        LocalCluster(LOCAL_CLUSTER_NAME).down()


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    start = getattr(config, "_suite_start", None)
    if start is not None:
        terminalreporter.write_line(f"suite duration: {time.monotonic() - start:.1f} s")


@pytest.fixture(scope="session")
def kube() -> Kube:
    """The cluster under test. Always real: KUBECONFIG's cluster or the local control plane."""
    kubeconfig = os.environ.get("KUBECONFIG")
    if not kubeconfig:
        pytest.fail("no cluster: KUBECONFIG is unset and the local cluster was not brought up "
                    "(tests deselected with -m 'not cluster' must not use the kube fixture)")
    return Kube(Path(kubeconfig.split(os.pathsep)[0]), find_kubectl())


@pytest.fixture
def namespace(kube: Kube, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace for one test, deleted afterwards."""
    base = request.node.name.split("[")[0].lower().replace("_", "-").removeprefix("test-")[:40].strip("-")
    name = f"t-{base}-{uuid.uuid4().hex[:6]}"
    kube.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(
        name=name, labels={"playbook-operator.test/namespace": "true"})))
    try:
        yield name
    finally:
        try:
            kube.core.delete_namespace(name, propagation_policy="Background")
        except client.ApiException as exc:
            if exc.status != 404:
                raise
