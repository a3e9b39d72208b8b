"""Node faults, on the local cluster of three real nodes (``cluster --name nodes up --real-node --nodes 3``), caused
with the commands users have (``playbook-operator cluster node NAME poweroff|...``), with the SampleDB operator as
deployed, the writer and the checker on a node the fault spares. Each proof: three servers, one per node, in the
default (sync) mode unless it says async; the fault hits the primary's node; a replica is promoted, writes resume, no
acknowledged row is lost (async mode: what is lost is counted and bounded), no two servers could take writes at once
(by the checker's polls and by each server's own record), and once the node is repaired its server comes back as a
replica. The write gap is printed (bench.e2e reports it), not asserted."""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator

import pytest
import yaml

from kubectl_sampledb.sql import lsn
from localcluster.cluster import LocalCluster
from localcluster.netnode import Fault
from tests.kube import Kube, explained_by_containers, wait_for
from tests.nodefaults import TERM, drain_each_node, primary_node_fault, repair_all
from tests.operator import ROOT, install_sampledb_crds
from tests.realnode import (
    NODES_CLUSTER_NAME,
    NODES_LANE,
    POSTGRES_IMAGE,
    STOP_NODES_AFTER,
    psql_in_server,
    ready_database,
)
from tests.sampledb import GROUP, PLURAL, VERSION, events, get, let_namespace_go, roles
from tests.writes import PrimaryChecker, Writer, assert_safe, server_history, under_writes


@pytest.fixture(scope="module", autouse=True)
def _stopped_after() -> Iterator[None]:
    """The cluster of several nodes goes once these tests have run, if this session started it (conftest)."""
    yield
    if os.environ.get(STOP_NODES_AFTER):
        LocalCluster(NODES_CLUSTER_NAME).down()


STREAMED_WITHIN = 5  # s: a healthy async replica has what its primary acknowledged longer ago than this (2 cores, busy)


@pytest.fixture
def healthy_nodes(nodes: Kube, nodes_cluster) -> None:
    """Each proof starts on three healthy nodes."""
    repair_all(nodes, nodes_cluster)


@NODES_LANE
def test_a_powered_off_primary_node_fails_over_and_its_server_rejoins_as_a_replica_when_powered_on(
        nodes: Kube, nodes_cluster, healthy_nodes: None, nodes_namespace: str, nodes_sampledb_operator) -> None:
    """Kubelet, containerd and the server stop at once and nothing on that node will confirm anything: the replica is
    promoted once the old primary's term has run out."""
    nodes_sampledb_operator()
    out = primary_node_fault(nodes, nodes_cluster, nodes_namespace, "off", Fault.POWEROFF, Fault.POWERON)
    assert "its term ran out" in out.failed_over, out.failed_over


@NODES_LANE
def test_a_dead_kubelet_under_the_primary_never_leaves_two_servers_taking_writes(
        nodes: Kube, nodes_cluster, healthy_nodes: None, nodes_namespace: str, nodes_sampledb_operator) -> None:
    """The primary's kubelet dies and its containers run on, reachable by clients and by the checker: the old primary
    stops taking writes (its Lease agent reads that the Lease no longer names it) before a replica is promoted."""
    nodes_sampledb_operator()
    primary_node_fault(nodes, nodes_cluster, nodes_namespace, "kub", Fault.KUBELET_STOP, Fault.KUBELET_START)


@NODES_LANE
def test_a_partitioned_primary_node_stops_taking_writes_within_its_term_and_rejoins_when_healed(
        nodes: Kube, nodes_cluster, healthy_nodes: None, nodes_namespace: str, nodes_sampledb_operator) -> None:
    """The primary's node is cut off from the API server and from the other nodes, both ways: the isolated primary
    stops taking writes within its term (by its own record, read once healed), a replica on the other side is
    promoted, and healed, the old primary rejoins as a replica."""
    nodes_sampledb_operator()
    ns = nodes_namespace
    out = primary_node_fault(nodes, nodes_cluster, ns, "part", Fault.PARTITION, Fault.HEAL)
    stopped = [at for at, what in server_history(nodes, ns, [out.old])[out.old] if what == "stopped" and at > out.cut]
    assert stopped and stopped[0] - out.cut <= TERM + 5, (stopped, out.cut)  # within its term (and a fast shutdown)


@NODES_LANE
def test_async_a_partitioned_primary_loses_only_its_last_unstreamed_rows(
        nodes: Kube, nodes_cluster, healthy_nodes: None, nodes_namespace: str, nodes_sampledb_operator) -> None:
    """async mode: a commit waits for no replica, so rows the isolated primary acknowledged but had not streamed yet are
    lost when a replica on the other side is promoted. They are counted, and they are only that: the newest rows
    acknowledged before the cut (the replicas streamed all the rest, and the most advanced is promoted), nothing
    acknowledged once writes resumed. The promoted replica was within spec.replication.maximumLagOnFailover of the
    primary's last position recorded in the Lease (a replica further behind is refused: test_data_safety's async
    proof)."""
    nodes_sampledb_operator()
    ns, bound = nodes_namespace, 1048576
    out = primary_node_fault(nodes, nodes_cluster, ns, "apart", Fault.PARTITION, Fault.HEAL,
                             replication={"mode": "async", "maximumLagOnFailover": bound})
    positions = dict(re.findall(r"(\S+) ([0-9A-F]+/[0-9A-F]+) \(timeline", out.failed_over))
    assert out.new in positions and out.recorded, (out.failed_over, out.recorded)
    behind = lsn(out.recorded) - lsn(positions[out.new])
    assert behind <= bound, f"{out.new} was promoted {behind} bytes behind {out.recorded} (bound {bound})"
    # (a replica's WAL is a prefix of its primary's: what it lacks is the newest the old primary acknowledged)
    assert not out.lost or max(out.kept_before, default=-1) < min(out.lost), (out.lost[:10], out.kept_before[-5:])
    late = [at for at in out.lost_acked_at if at >= out.resumed]
    assert not late, f"{len(late)} rows acknowledged after writes resumed were lost"
    early = [at for at in out.lost_acked_at if at < out.cut - STREAMED_WITHIN]
    assert not early, f"{len(early)} lost rows were acknowledged over {STREAMED_WITHIN} s before the cut: {early[:5]}"
    print(f"async, bound {bound} B: {len(out.lost)} acknowledged rows lost ({out.lost[:10]}); {out.new} promoted "
          f"{abs(behind)} bytes {'behind' if behind > 0 else 'ahead of'} the last recorded position {out.recorded}")


@NODES_LANE
def test_each_node_drained_in_turn_costs_at_most_a_switchover_and_loses_nothing(
        nodes: Kube, nodes_cluster, healthy_nodes: None, nodes_namespace: str, nodes_sampledb_operator) -> None:
    """`kubectl drain` of each node in turn, then `uncordon`, under writes: the primary's disruption budget holds its
    eviction until the operator has switched the primary over to a server on another node, so a drain of the
    primary's node costs a switchover's write gap and a drain of a replica's node none; no failover, no acknowledged
    row lost, never two servers taking writes. (The drain evicts the database's servers: the writer and the checker
    stay where they are, as a user's clients elsewhere would. A drained server's volume is on its node, so its pod
    waits there until the uncordon.)"""
    nodes_sampledb_operator(watch_nodes=True)
    ns, name = nodes_namespace, "drn"
    _, servers, checker, writer = under_writes(nodes, ns, name, replicas=3)
    assert len({nodes.core.read_namespaced_pod(p, ns).spec.node_name for p in servers}) == 3
    writer.wait_for_more(10)
    gaps = drain_each_node(nodes, ns, name, writer)
    writes = writer.stop()
    assert_safe(nodes, ns, name, writes, checker.stop(), servers)
    assert not events(nodes, ns, "FailedOver"), [e.message for e in events(nodes, ns, "FailedOver")]
    assert sum(held for _, held, _ in gaps) >= 1 and events(nodes, ns, "SwitchedOver")
    for node, held, gap in gaps:
        print(f"drain of {node} ({'the primary' if held else 'a replica'}'s node): write gap {gap:.1f} s")
    print(f"{len(writes.acked)} rows acknowledged, {len(writes.failed)} attempts failed")


OPERATOR_NAMESPACE = "sampledb-system"  # deploy/default's
PLACEMENT_LABEL = "sampledb.example.com/test-placement"


@pytest.fixture
def operator_in_cluster(nodes: Kube, nodes_namespace: str) -> Iterator[None]:
    """The operator exactly as `kubectl apply -k deploy/default` runs it (its image, ServiceAccount, ClusterRole, two
    replicas on different nodes electing a leader), but watching only this test's namespace, so that it shares no
    database with the other tests' operators. Afterwards the namespace goes while it still runs (its SampleDBs'
    finalizers), then its Deployment."""
    install_sampledb_crds(nodes)
    docs = list(yaml.safe_load_all(nodes.kubectl("kustomize", str(ROOT / "deploy" / "default")).stdout))
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    env = deployment["spec"]["template"]["spec"]["containers"][0]["env"]
    (watched,) = [e for e in env if e["name"] == "WATCH_NAMESPACE"]  # (else it would watch every test's namespace)
    watched["value"] = nodes_namespace
    docs = [d for d in docs if d["kind"] != "CustomResourceDefinition"]

    def remove() -> None:
        nodes.kubectl("-n", OPERATOR_NAMESPACE, "delete", "deployment", "sampledb-operator", "--ignore-not-found",
                      "--wait=true", "--timeout=120s", check=False, timeout=150)

    remove()  # (one an interrupted session left would watch another namespace)
    try:
        nodes.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", input=yaml.safe_dump_all(docs))
        nodes.kubectl("-n", OPERATOR_NAMESPACE, "rollout", "status", "deployment/sampledb-operator", "--timeout=180s",
                      timeout=200)
        yield
    finally:
        try:
            let_namespace_go(nodes, nodes_namespace, timeout=300)
        finally:
            remove()


def _operator_pods(kube: Kube) -> dict[str, str]:
    return {p.metadata.name: p.spec.node_name for p in kube.core.list_namespaced_pod(
        OPERATOR_NAMESPACE, label_selector="app.kubernetes.io/name=sampledb-operator").items
        if not p.metadata.deletion_timestamp}


def _leading_operator(kube: Kube) -> str:
    holder = kube.coordination.read_namespaced_lease("sampledb-operator", OPERATOR_NAMESPACE).spec.holder_identity
    return (holder or "").split("_")[0]


@NODES_LANE
def test_the_leading_operators_node_lost_during_a_failover_the_other_operator_completes_it(
        nodes: Kube, nodes_cluster, healthy_nodes: None, nodes_namespace: str, operator_in_cluster: None) -> None:
    """Two servers on two nodes, the operator's two replicas on the third node and on the replica's node. The
    primary's node is powered off; once the failover is under way (recorded in the database's Lease), the node of the
    operator that leads is powered off too: the other operator takes the lead and completes the failover, no
    acknowledged row is lost, and once both nodes are back the old primary rejoins as a replica. (In sync mode the
    new primary's commits wait for a standby: with two servers, writes resume when the old primary has rejoined.)"""
    ns, name = nodes_namespace, "opn"
    operators = wait_for("the two operators on different nodes, one leading", lambda: (
        ops := _operator_pods(nodes)) and len(set(ops.values())) == 2 and _leading_operator(nodes) in ops and ops,
        timeout=120, interval=2)
    leader = _leading_operator(nodes)
    leader_node = operators[leader]
    standby_node = next(n for p, n in operators.items() if p != leader)
    spare = next(n.metadata.name for n in nodes.core.list_node().items
                 if n.metadata.name not in (leader_node, standby_node))
    try:
        for node in (spare, standby_node):
            nodes.kubectl("label", "node", node, f"{PLACEMENT_LABEL}={ns}", "--overwrite")
        db = ready_database(nodes, ns, name, replicas=2, affinity={"nodeSelector": {PLACEMENT_LABEL: ns}})
        old = db["status"]["currentPrimary"]
        placed = {p: nodes.core.read_namespaced_pod(p, ns).spec.node_name for p in roles(nodes, ns, name)}
        assert sorted(placed.values()) == sorted([spare, standby_node]), placed
        if placed[old] != spare:  # the primary on the node without an operator
            other = next(p for p in placed if p != old)
            nodes.custom.patch_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, name, {"metadata": {
                "annotations": {"sampledb.example.com/switchover-to": other}}})
            wait_for(f"{other} to be the primary", lambda: (st := get(nodes, ns, name)["status"]).get(
                "currentPrimary") == other and st.get("phase") == "Ready", timeout=180, interval=2)
            old = other
        servers = sorted(placed)
        # the writer and the checker on the one node that stays up
        checker = PrimaryChecker(nodes, ns, name, servers, POSTGRES_IMAGE, avoid_node=[spare, leader_node])
        writer = Writer(nodes, ns, name, POSTGRES_IMAGE, avoid_node=[spare, leader_node])
        writer.wait_for_more(10)
        cut = time.time()
        try:
            print(nodes_cluster.fault(spare, Fault.POWEROFF))
            wait_for("the failover to be under way", lambda: (nodes.coordination.read_namespaced_lease(
                f"{name}-primary", ns).metadata.annotations or {}).get("sampledb.example.com/fencing") == old,
                timeout=240, interval=1)
            assert _leading_operator(nodes) == leader, "the lead moved before the fault: the set-up no longer holds"
            lost = time.time()
            print(nodes_cluster.fault(leader_node, Fault.POWEROFF))
            new = wait_for("the other operator to promote a replica", lambda: (
                p := get(nodes, ns, name)["status"].get("currentPrimary")) not in (None, old) and p,
                timeout=300, interval=1)
            done = time.time()
            assert _leading_operator(nodes) != leader
        finally:
            print(nodes_cluster.fault(leader_node, Fault.POWERON))
            print(nodes_cluster.fault(spare, Fault.POWERON))
        # (sync mode with two servers: the new primary's commits wait for a standby, the old primary once it rejoins)
        writer.wait_for_more(20, timeout=300)
        gap = writer.writes().longest_gap(cut)
        with explained_by_containers(nodes, ns, name):
            wait_for(f"{old} back as a replica", lambda: psql_in_server(
                nodes, ns, old, "select pg_is_in_recovery()", check=False) == "t", timeout=300, interval=2)
        writes = writer.stop()
        assert assert_safe(nodes, ns, name, writes, checker.stop(), servers) == new
        failed_over = events(nodes, ns, "FailedOver")
        assert failed_over and f"promoted {new}" in failed_over[-1].message, [e.message for e in failed_over]
        print(f"primary's node {spare} and then the leading operator's node {leader_node} powered off: {old} → {new} "
              f"{done - lost:.1f} s after the operator's loss; write gap {gap:.1f} s; {len(writes.acked)} rows "
              f"acknowledged; FailedOver: {failed_over[-1].message}")
    finally:
        for node in (spare, standby_node):
            nodes.kubectl("label", "node", node, f"{PLACEMENT_LABEL}-", check=False)
