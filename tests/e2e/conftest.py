"""Fixtures of the e2e tier: a cluster whose pods really run (the local ``e2e`` cluster's real node, or
E2E_KUBECONFIG), a namespace per test there, and the SampleDB operator as deployed: a local process holding the token
of deploy/rbac's ServiceAccount (never the admin's), electing a leader, with the roles' own defaults."""

from __future__ import annotations

import fcntl
import hashlib
import os
import tempfile
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest
import yaml

from localcluster.cluster import LocalCluster
from tests.kube import Kube, find_kubectl, fresh_namespace, wait_for
from tests.operator import ROOT, OperatorProcess, install_sampledb_crds, sampledb_watches, stop_all
from tests.realnode import AS_DEPLOYED_VARS, as_deployed_args, deployed_credentials
from tests.sampledb import GROUP, PLURAL, VERSION


def _run_dir(config: pytest.Config) -> Path | None:
    """A directory that this run's xdist workers share (named after the run's id), where the lanes meet; None in a
    run without workers, whose tests all run one after the other."""
    workerinput = getattr(config, "workerinput", None)
    if workerinput is None:
        return None
    path = Path(tempfile.gettempdir()) / f"playbook-operator-e2e-{workerinput['testrunuid']}"
    path.mkdir(exist_ok=True)
    return path


def _ended_marker(run: Path, item: pytest.Item) -> Path:
    return run / f"ended-{hashlib.sha1(item.nodeid.encode()).hexdigest()}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None):
    # after every e2e test, passed, failed or skipped: the other lane may be waiting for it (see other_lanes_ended)
    yield
    if run := _run_dir(item.config):
        _ended_marker(run, item).touch()


def _lane(item: pytest.Item) -> str:
    marker = item.get_closest_marker("xdist_group")
    return marker.args[0] if marker else ""


@pytest.fixture
def other_lanes_ended(request: pytest.FixtureRequest) -> None:
    """Waits until every selected e2e test of the other lanes has ended: for a test that stops the cluster."""
    if not (run := _run_dir(request.config)):
        return
    mine = _lane(request.node)
    others = [i for i in request.session.items if "/tests/e2e/" in str(i.path) and _lane(i) != mine]
    wait_for(f"the other e2e lanes' {len(others)} tests to end", lambda: all(
        _ended_marker(run, i).exists() for i in others), timeout=3600, interval=5)


@contextmanager
def _flock(path: Path, operation: int) -> Iterator[None]:
    with open(path, "a") as fh:
        fcntl.flock(fh, operation)
        yield


@pytest.fixture(autouse=True)
def _node_shared(request: pytest.FixtureRequest) -> Iterator[None]:
    """Every e2e test shares the node with the other lane's, unless it asks for the node to itself. The turnstile
    lets a test waiting for the node to itself in before the other lane's next test."""
    run = _run_dir(request.config)
    # (a test that waits for the other lanes to end holds nothing: one of theirs may wait for the node to itself)
    if not run or {"node_to_itself", "other_lanes_ended"} & set(request.fixturenames):
        yield
        return
    with _flock(run / "turnstile.lock", fcntl.LOCK_EX):
        pass
    with _flock(run / "node.lock", fcntl.LOCK_SH):
        yield


@pytest.fixture
def node_to_itself(request: pytest.FixtureRequest) -> Iterator[None]:
    """No other lane's test runs meanwhile: for a test that cordons the node (whose SampleDBs' operators would move
    their primaries off it) or runs an operator that watches every namespace (two operators would manage one
    SampleDB)."""
    if not (run := _run_dir(request.config)):
        yield
        return
    with ExitStack() as held:
        with _flock(run / "turnstile.lock", fcntl.LOCK_EX):
            held.enter_context(_flock(run / "node.lock", fcntl.LOCK_EX))
        yield


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


@pytest.fixture(scope="session")
def operator_kubeconfig(real: Kube, real_sampledb_crds: None, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The credentials the operator's pod has: deploy/rbac's ServiceAccount's token."""
    return deployed_credentials(real, tmp_path_factory.mktemp("operator") / "kubeconfig")


@pytest.fixture
def real_sampledb_operator(real: Kube, real_namespace: str, real_sampledb_crds: None, operator_kubeconfig: Path,
                           tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Callable[..., OperatorProcess]]:
    """Starts this repository's SampleDB operator (watches.yaml, roles) as deployed: a local process with deploy/rbac's
    ServiceAccount token, leader election on (a Lease of the test's own in the operator's namespace), the production
    retry backoff and the roles' defaults, watching the test's namespace on the real-node cluster; keyword arguments
    become watch vars. Shows its log on failure."""
    ops: list[OperatorProcess] = []
    lease = f"sampledb-operator-{uuid.uuid4().hex[:8]}"

    def start(*args: str, env: dict[str, str] | None = None, **extra_vars: object) -> OperatorProcess:
        credentials = {"KUBECONFIG": str(operator_kubeconfig), "K8S_AUTH_KUBECONFIG": str(operator_kubeconfig)}
        op = OperatorProcess(real, real_namespace, tmp_path, sampledb_watches(**{**AS_DEPLOYED_VARS, **extra_vars}),
                             ["--ansible-roles-path", str(ROOT / "roles"), *as_deployed_args(lease), *args],
                             {**credentials, **(env or {})}, name=f"sampledb-operator-{len(ops)}")
        ops.append(op.start())
        return op

    yield start
    failed = getattr(request.node, "rep_call", None)
    if ops and failed is not None and failed.failed:
        # what the user would look at first: each SampleDB's status, and the last failing task of each run
        for db in real.custom.list_namespaced_custom_object(GROUP, VERSION, real_namespace, PLURAL)["items"]:
            print(f"\n--- SampleDB {db['metadata']['name']} status ---\n{yaml.safe_dump(db.get('status') or {})}")
    if ops:
        # The namespace goes while the operator still runs, so that its SampleDBs' finalizers let them go
        # (and their servers stop) instead of leaving the namespace Terminating on this shared cluster.
        real.core.delete_namespace(real_namespace, propagation_policy="Background")
        wait_for("the test's SampleDBs to be let go with their namespace", lambda: not real.custom.
                 list_namespaced_custom_object(GROUP, VERSION, real_namespace, PLURAL)["items"], timeout=180)
    stop_all(ops, request)


@pytest.fixture(scope="session")
def local() -> LocalCluster:
    cluster = LocalCluster("e2e")
    if os.environ.get("E2E_KUBECONFIG") != str(cluster.paths.kubeconfig) or not cluster.running():
        pytest.fail("these tests check the local cluster 'e2e' (cluster --name e2e up --real-node), "
                    f"which is not the e2e cluster in use (E2E_KUBECONFIG={os.environ.get('E2E_KUBECONFIG')})")
    return cluster
