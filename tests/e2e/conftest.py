"""Fixtures of the e2e tier: a cluster whose pods really run (the local ``e2e`` cluster's real node, or
E2E_KUBECONFIG), a namespace per test there, and the SampleDB operator as deployed: a local process holding the token
of deploy/rbac's ServiceAccount (never the admin's), electing a leader, with the roles' own defaults."""

from __future__ import annotations

import fcntl
import hashlib
import os
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest
import yaml

from localcluster.cluster import LocalCluster
from tests.kube import Kube, find_kubectl, fresh_namespace, print_restarted_containers, wait_for
from tests.operator import ROOT, OperatorProcess, install_sampledb_crds, sampledb_watches, stop_all
from tests.realnode import (
    AS_DEPLOYED_VARS,
    NODES_CLUSTER_NAME,
    as_deployed_args,
    deployed_credentials,
    process_alive,
)
from tests.sampledb import GROUP, PLURAL, VERSION, let_namespace_go

_RUN_DIR = pytest.StashKey[Path]()
OWN_CLUSTER_LANE = "e2e-nodes"  # its tests run on the cluster of several nodes, never on the real node


@pytest.fixture(scope="session", autouse=True)
def _lanes_meet(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> None:
    """Under xdist, a directory that this run's workers share (beside their own temporary directories, which pytest
    removes after a few runs): where the lanes meet. A run without workers runs its tests one after the other."""
    if hasattr(request.config, "workerinput"):
        run = tmp_path_factory.getbasetemp().parent / "e2e-lanes"
        run.mkdir(exist_ok=True)
        request.config.stash[_RUN_DIR] = run


def _run_dir(config: pytest.Config) -> Path | None:
    return config.stash.get(_RUN_DIR, None)


def _lane(item: pytest.Item) -> str:
    marker = item.get_closest_marker("xdist_group")
    return marker.args[0] if marker else ""


def _ended_marker(run: Path, item: pytest.Item) -> Path:
    return run / f"ended-{hashlib.sha1(item.nodeid.encode()).hexdigest()}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None):
    # after every e2e test, passed, failed or skipped: the other lane may be waiting for it (see other_lanes_ended)
    yield
    if run := _run_dir(item.config):
        _ended_marker(run, item).touch()


@pytest.fixture
def other_lanes_ended(request: pytest.FixtureRequest) -> None:
    """For a test that stops the cluster: waits until the tests of every other lane that runs on another worker have
    ended. A lane not started yet (fewer workers than lanes: it waits behind this one) or whose worker is gone (-x, a
    crash) is not waited for; node_to_itself then keeps it off the node while this test runs."""
    if not (run := _run_dir(request.config)):
        return
    mine = _lane(request.node)
    others: dict[str, list[pytest.Item]] = {}
    for item in request.session.items:
        if "/tests/e2e/" in str(item.path) and _lane(item) not in (mine, OWN_CLUSTER_LANE):
            others.setdefault(_lane(item), []).append(item)

    def pending() -> list[str]:
        waiting = []
        for lane, items in others.items():
            worker = run / f"lane-{lane}"
            if worker.exists() and process_alive(int(worker.read_text() or 0)) and not all(
                    _ended_marker(run, i).exists() for i in items):
                waiting.append(lane)
        return waiting

    wait_for(f"the other e2e lanes ({', '.join(others)}) to end", lambda: not pending(), timeout=3600, interval=5)


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
    if _lane(request.node) == OWN_CLUSTER_LANE:
        yield
        return
    if run:
        (run / f"lane-{_lane(request.node)}").write_text(str(os.getpid()))
    # (a test that waits for the other lanes to end holds nothing meanwhile: one of theirs may want the node)
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
    their primaries off it), runs an operator that watches every namespace (two operators would manage one
    SampleDB) or stops the cluster."""
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


def operators_as_deployed(kube: Kube, namespace: str, kubeconfig: Path, tmp_path: Path,
                          request: pytest.FixtureRequest) -> Iterator[Callable[..., OperatorProcess]]:
    """Yields a function that starts this repository's SampleDB operator as deployed (see real_sampledb_operator) on
    ``kube``'s cluster; afterwards lets the namespace go while they still run, then stops them."""
    ops: list[OperatorProcess] = []
    lease = f"sampledb-operator-{uuid.uuid4().hex[:8]}"

    def start(*args: str, env: dict[str, str] | None = None, watch_nodes: bool = False,
              **extra_vars: object) -> OperatorProcess:
        credentials = {"KUBECONFIG": str(kubeconfig), "K8S_AUTH_KUBECONFIG": str(kubeconfig)}
        op = OperatorProcess(kube, namespace, tmp_path, sampledb_watches(
            nodes=watch_nodes, **{**AS_DEPLOYED_VARS, **extra_vars}),
                             ["--ansible-roles-path", str(ROOT / "roles"), *as_deployed_args(lease), *args],
                             {**credentials, **(env or {})}, name=f"sampledb-operator-{len(ops)}")
        ops.append(op.start())
        return op

    yield start
    failed = getattr(request.node, "rep_call", None)
    if ops and failed is not None and failed.failed:
        # what the user would look at first: each SampleDB's status, and the last failing task of each run
        for db in kube.custom.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)["items"]:
            print(f"\n--- SampleDB {db['metadata']['name']} status ---\n{yaml.safe_dump(db.get('status') or {})}")
        try:
            print_restarted_containers(kube, namespace)
            # (a change of primary, a probe that failed, a rollout: what kubectl get events would show)
            events = sorted(kube.core.list_namespaced_event(namespace).items,
                            key=lambda e: e.last_timestamp or e.event_time or e.metadata.creation_timestamp)
            print("\n--- the namespace's last Events ---")
            for e in events[-60:]:
                when = e.last_timestamp or e.event_time or e.metadata.creation_timestamp
                print(f"{when:%H:%M:%S} {e.type} {e.reason} {e.involved_object.kind}/{e.involved_object.name}: "
                      f"{(e.message or '').strip()[:300]}")
        except Exception as exc:  # (what is shown on failure must not keep the namespace from going)
            print(f"(the restarted containers or the Events could not be read: {exc})")
    if ops:
        let_namespace_go(kube, namespace)
    stop_all(ops, request)



@pytest.fixture
def real_sampledb_operator(real: Kube, real_namespace: str, real_sampledb_crds: None, operator_kubeconfig: Path,
                           tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Callable[..., OperatorProcess]]:
    """Starts this repository's SampleDB operator (watches.yaml, roles) as deployed: a local process with deploy/rbac's
    ServiceAccount token, leader election on (a Lease of the test's own in the operator's namespace), the production
    retry backoff and the roles' defaults, watching the test's namespace on the real-node cluster; keyword arguments
    become watch vars. Shows its log on failure."""
    yield from operators_as_deployed(real, real_namespace, operator_kubeconfig, tmp_path, request)


@pytest.fixture(scope="session")
def nodes() -> Kube:
    """The cluster with several real nodes (the local cluster 'nodes', three of them), whose faults tests cause."""
    kubeconfig = os.environ.get("E2E_NODES_KUBECONFIG")
    if not kubeconfig:
        pytest.fail("no cluster with several real nodes: E2E_NODES_KUBECONFIG is unset and the local cluster "
                    "'nodes' (cluster --name nodes up --real-node --nodes 3) was not brought up")
    return Kube(Path(kubeconfig), find_kubectl())


@pytest.fixture(scope="session")
def nodes_cluster(nodes: Kube) -> LocalCluster:
    """The local cluster behind ``nodes``: what causes its nodes' faults."""
    cluster = LocalCluster(NODES_CLUSTER_NAME)
    if str(cluster.paths.kubeconfig) != str(nodes.kubeconfig) or not cluster.running():
        pytest.fail(f"the node faults need the local cluster 'nodes' running, not {nodes.kubeconfig}")
    return cluster


@pytest.fixture
def nodes_namespace(nodes: Kube, request: pytest.FixtureRequest) -> Iterator[str]:
    yield from fresh_namespace(nodes, request.node.name)


@pytest.fixture
def nodes_sampledb_operator(nodes: Kube, nodes_namespace: str, tmp_path: Path,
                            request: pytest.FixtureRequest) -> Iterator[Callable[..., OperatorProcess]]:
    """real_sampledb_operator, on the cluster with several nodes."""
    install_sampledb_crds(nodes)
    kubeconfig = deployed_credentials(nodes, tmp_path / "operator-kubeconfig")
    yield from operators_as_deployed(nodes, nodes_namespace, kubeconfig, tmp_path, request)


@pytest.fixture(scope="session")
def local() -> LocalCluster:
    cluster = LocalCluster("e2e")
    if os.environ.get("E2E_KUBECONFIG") != str(cluster.paths.kubeconfig) or not cluster.running():
        pytest.fail("these tests check the local cluster 'e2e' (cluster --name e2e up --real-node), "
                    f"which is not the e2e cluster in use (E2E_KUBECONFIG={os.environ.get('E2E_KUBECONFIG')})")
    return cluster
