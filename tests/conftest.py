"""The test harness: one real cluster per test session, one namespace per test.

With KUBECONFIG set, tests use that cluster (kind, k3d, a real one). Without it, the local control
plane named ``test`` is brought up (built the first time) and stopped again at the end of the session
if this session started it (set PLAYBOOK_OPERATOR_KEEP_CLUSTER=1 to keep it for the next run).

The e2e tier (tests/e2e) needs pods that really run: it uses E2E_KUBECONFIG (or KUBECONFIG) when set,
else the local cluster ``e2e`` with a real node (``cluster --name e2e up --real-node``), brought up
here too, before any worker starts, so that its first build does not compete with running tests. Its node
faults need the local cluster ``nodes`` (three real nodes), brought up the same way unless E2E_NODES_KUBECONFIG
names it already.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.kube import Kube, find_kubectl, fresh_namespace, remove_stale_test_namespaces
from tests.realnode import NODES, NODES_CLUSTER_NAME, STOP_NODES_AFTER

LOCAL_CLUSTER_NAME = "test"
E2E_CLUSTER_NAME = "e2e"


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

    if _wants_e2e(config) and not os.environ.get("E2E_KUBECONFIG"):
        e2e = LocalCluster(E2E_CLUSTER_NAME, real_node=True)
        config._started_e2e = not e2e.running()  # type: ignore[attr-defined]
        took = e2e.up(timeout=300)
        print(f"\nlocal cluster {E2E_CLUSTER_NAME!r} (real node) ready in {took:.1f} s ({e2e.paths.root})")
        # the servers' Lease agent runs on the operator's image (built when changed), as under `make run`
        began = time.monotonic()
        e2e.load_images(include_operator=True)
        print(f"images (the operator's included) on the real node in {time.monotonic() - began:.1f} s")
        _remove_stale_namespaces(e2e.paths.kubeconfig)
        os.environ["E2E_KUBECONFIG"] = str(e2e.paths.kubeconfig)
    if _wants_several_nodes(config) and not os.environ.get("E2E_NODES_KUBECONFIG"):
        several = LocalCluster(NODES_CLUSTER_NAME, real_node=True, nodes=NODES)
        if not several.running() and not os.environ.get("PLAYBOOK_OPERATOR_KEEP_CLUSTER"):
            # its idle kubelets cost a third of a core: its tests' module stops it once they have run (on their worker)
            os.environ[STOP_NODES_AFTER] = "1"
        took = several.up(timeout=600)
        began = time.monotonic()
        several.load_images(include_operator=True)
        print(f"local cluster {NODES_CLUSTER_NAME!r} ({NODES} real nodes) ready in {took:.1f} s, images in "
              f"{time.monotonic() - began:.1f} s ({several.paths.root})")
        _remove_stale_namespaces(several.paths.kubeconfig)
        os.environ["E2E_NODES_KUBECONFIG"] = str(several.paths.kubeconfig)
    cluster = LocalCluster(LOCAL_CLUSTER_NAME)
    config._started_cluster = not cluster.running()  # type: ignore[attr-defined]
    took = cluster.up()
    print(f"\nlocal cluster {LOCAL_CLUSTER_NAME!r} ready in {took:.1f} s ({cluster.paths.root})")
    _remove_stale_namespaces(cluster.paths.kubeconfig)
    os.environ["KUBECONFIG"] = str(cluster.paths.kubeconfig)
    os.environ["PATH"] = f"{binary('kubectl').parent}:{os.environ['PATH']}"


def _remove_stale_namespaces(kubeconfig: Path) -> None:
    removed = remove_stale_test_namespaces(kubeconfig)
    if removed:
        print(f"removed {len(removed)} test namespaces an earlier session left: {', '.join(removed)}")


def _wants_cluster(config: pytest.Config) -> bool:
    markexpr = config.getoption("markexpr", "") or ""
    return "not cluster" not in markexpr


def _wants_e2e(config: pytest.Config) -> bool:
    """Whether the selected tests may include the e2e tier (by path and marker; cheap, before collection)."""
    markexpr = config.getoption("markexpr", "") or ""
    if "not e2e" in markexpr:
        return False
    args = [str(a) for a in config.args] or ["tests"]
    return any("e2e" in a or a.rstrip("/") in ("tests", ".") or a.endswith("/tests") for a in args)


def _wants_several_nodes(config: pytest.Config) -> bool:
    """Whether the selected tests may include the node faults: the whole suite or tier, or their module."""
    if not _wants_e2e(config):
        return False
    args = [str(a).split("::")[0].rstrip("/") for a in config.args] or ["tests"]
    return any(a in ("tests", ".", "tests/e2e") or a.endswith(("/tests", "/tests/e2e", "test_several_nodes.py"))
               for a in args)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # tests/integration talks to a real cluster (unit tests use fakes; script tests use real PostgreSQL).
    for item in items:
        if "/tests/integration/" in str(item.path) or "/tests/compat/" in str(item.path):
            item.add_marker(pytest.mark.cluster)
        if "/tests/e2e/" in str(item.path):
            item.add_marker(pytest.mark.cluster)
            item.add_marker(pytest.mark.e2e)


def pytest_runtest_setup(item: pytest.Item) -> None:
    # xdist_group keeps each e2e lane's modules in file order on one worker (tests/realnode.py's lanes).
    # pytest-xdist marks grouped items by rewriting their node ids; a pytest that ignores that rewrite
    # (9.2 with xdist 3.8) scatters the group silently, so its tests fail here instead of racing.
    if (_is_xdist_worker(item.config) and getattr(item.config.option, "loadgroup", False)
            and item.get_closest_marker("xdist_group") and "@" not in item.nodeid):
        pytest.fail("pytest-xdist did not keep this test's xdist_group together: this pytest/pytest-xdist "
                    "pair ignores xdist_group; install the pinned versions (constraints.txt)", pytrace=False)


def pytest_unconfigure(config: pytest.Config) -> None:
    if _is_xdist_worker(config):
        return
    if os.environ.get("PLAYBOOK_OPERATOR_KEEP_CLUSTER"):
        return
    from localcluster.cluster import LocalCluster

    if getattr(config, "_started_cluster", False):
        LocalCluster(LOCAL_CLUSTER_NAME).down()
    if getattr(config, "_started_e2e", False):
        LocalCluster(E2E_CLUSTER_NAME).down()
    if os.environ.get(STOP_NODES_AFTER):  # (when its tests did not run after all)
        LocalCluster(NODES_CLUSTER_NAME).down()


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
    yield from fresh_namespace(kube, request.node.name)


@pytest.hookimpl(tryfirst=True, hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):
    # item.rep_call tells fixtures' teardown whether the test failed (to show operator logs then)
    outcome = yield
    rep = outcome.get_result()
    setattr(item, f"rep_{rep.when}", rep)
