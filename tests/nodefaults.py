"""Node faults under writes, on the local cluster of several real nodes, as the proofs (tests/e2e/test_several_nodes.py)
and the benchmark (bench.e2e, its `nodes` section) cause them: the fault hits the primary's node (or each node is
drained in turn), the writer and the checker run on a node the fault spares, and what a user would see is measured."""

from __future__ import annotations

import time
from dataclasses import dataclass

from localcluster.cluster import LocalCluster
from localcluster.netnode import Fault
from tests.kube import Kube, explained_by_containers, wait_for
from tests.realnode import psql_in_server
from tests.sampledb import events, get
from tests.writes import Writer, assert_safe, table_rows, under_writes

TERM = 15  # spec.failover.termSeconds (the roles' default, given so that the proofs' checks follow it)
PRIMARY_LSN = "sampledb.example.com/primary-lsn"  # the primary's WAL position, as the operator last recorded it


def repair_all(kube: Kube, cluster: LocalCluster) -> None:
    """Whatever an earlier fault (or an interrupted session) left faulty is repaired, and every node is Ready."""
    for n in cluster.nodes:
        if not n.netns_exists():
            cluster.fault(n.name, Fault.POWERON)
        if n.partitioned():
            cluster.fault(n.name, Fault.HEAL)
        cluster.fault(n.name, Fault.KUBELET_START)
    wait_for(f"the {len(cluster.nodes)} nodes to be Ready", lambda: sum(
        any(c.type == "Ready" and c.status == "True" for c in n.status.conditions or [])
        for n in kube.core.list_node().items) == len(cluster.nodes), timeout=180, interval=2)


@dataclass
class Outcome:
    old: str
    new: str
    node: str
    cut: float
    gap: float
    failed_over: str
    lost: list[int]  # acknowledged rows not on the new primary (async mode only: asserted none otherwise)
    lost_acked_at: list[float]  # when each of them was acknowledged
    kept_before: list[int]  # acknowledged rows on the new primary that the old one acknowledged (before writes resumed)
    resumed: float  # the first acknowledgement after the fault's first failed write
    recorded: str  # the old primary's last position recorded in the Lease before the promotion ('' if none)


def primary_node_fault(kube: Kube, cluster: LocalCluster, ns: str, name: str, fault: Fault, repair: Fault,
                       pod_suffix: str = "", **spec: object) -> Outcome:
    """Causes ``fault`` on the primary's node of a new 3-server database (``spec`` added to its spec) under writes,
    waits for a replica promoted and writes flowing again, repairs the node, waits for its server back as a replica and
    checks that nothing was lost (in async mode, counts what was) and that no two servers took writes at once. The
    writer's and checker's pods are named with ``pod_suffix`` and stay (stopped)."""
    asynchronous = (spec.get("replication") or {}).get("mode") == "async"  # type: ignore[union-attr]
    old, servers, checker, writer = under_writes(kube, ns, name, replicas=3, failover={"termSeconds": TERM},
                                                 away_from_primary=True, pod_suffix=pod_suffix, **spec)
    placed = {p: kube.core.read_namespaced_pod(p, ns).spec.node_name for p in servers}
    assert len(set(placed.values())) == 3, f"the servers do not spread over the three nodes: {placed}"
    node = placed[old]
    writer.wait_for_more(10)
    recorded = ""

    def promoted() -> str | None:
        nonlocal recorded
        lease = kube.coordination.read_namespaced_lease(f"{name}-primary", ns)
        if lease.spec.holder_identity in (None, "", old):  # (the position the failover was bounded by)
            recorded = (lease.metadata.annotations or {}).get(PRIMARY_LSN, "")
        return (p := get(kube, ns, name)["status"].get("currentPrimary")) != old and p

    cut = time.time()
    try:
        print(cluster.fault(node, fault))
        with explained_by_containers(kube, ns, name):
            new = wait_for("a replica to be promoted", promoted, timeout=300, interval=1)
        writer.wait_for_more(20, timeout=300)
        gap = writer.writes().longest_gap(cut)
    finally:
        print(cluster.fault(node, repair))
    failed_over = events(kube, ns, "FailedOver")
    assert failed_over and f"promoted {new}" in failed_over[-1].message, [e.message for e in failed_over]
    with explained_by_containers(kube, ns, name):
        wait_for(f"{old} back as a replica", lambda: psql_in_server(
            kube, ns, old, "select pg_is_in_recovery()", check=False) == "t", timeout=300, interval=2)
    writes = writer.stop()
    assert assert_safe(kube, ns, name, writes, checker.stop(), servers, may_lose=asynchronous) == new
    kept = table_rows(kube, ns, new)
    lost = sorted(set(writes.acked) - kept)
    failed_at = min((t for t in writes.failed.values() if t > cut), default=cut)
    resumed = min((t for t in writes.acked.values() if t > failed_at), default=failed_at)
    kept_before = sorted(s for s in kept & set(writes.acked) if writes.acked[s] < resumed)
    print(f"{fault} of the primary's node {node}: {old} → {new}; write gap {gap:.1f} s; {len(writes.acked)} rows "
          f"acknowledged, {len(lost)} lost, {len(writes.failed)} attempts failed; FailedOver: {failed_over[-1].message}")
    return Outcome(old, new, node, cut, gap, failed_over[-1].message, lost, [writes.acked[s] for s in lost],
                   kept_before, resumed, recorded)


def drain_each_node(kube: Kube, ns: str, name: str, writer: Writer) -> list[tuple[str, bool, float]]:
    """`kubectl drain` of each node in turn (the database's servers only: the writer and the checker stay where they
    are, as a user's clients elsewhere would), then `uncordon`, each time waiting for the database Ready with its
    three servers again: [(node, whether it held the primary, the write gap)]."""
    gaps: list[tuple[str, bool, float]] = []
    for node in sorted(n.metadata.name for n in kube.core.list_node().items):
        primary = get(kube, ns, name)["status"]["currentPrimary"]
        held_primary = kube.core.read_namespaced_pod(primary, ns).spec.node_name == node
        began = time.time()
        try:
            drained = kube.kubectl("drain", node, f"--pod-selector=app.kubernetes.io/instance={name}",
                                   "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=300s", timeout=320,
                                   check=False)
            assert drained.returncode == 0, drained.stdout + drained.stderr
            if held_primary:
                wait_for(f"status to name the primary {primary} handed over to", lambda old=primary: get(
                    kube, ns, name)["status"].get("currentPrimary") not in (None, old), timeout=60)
            else:
                assert get(kube, ns, name)["status"]["currentPrimary"] == primary
            writer.wait_for_more(5)
        finally:
            kube.kubectl("uncordon", node, check=False)
        gaps.append((node, held_primary, writer.writes().longest_gap(began, time.time())))
        with explained_by_containers(kube, ns, name):
            wait_for(f"{name} Ready with its three servers after {node}'s uncordon", lambda: (
                st := get(kube, ns, name).get("status", {})).get("phase") == "Ready" and st.get("readyReplicas") == 3,
                timeout=300, interval=2)
    return gaps
