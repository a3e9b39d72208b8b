"""`cluster down` on the real node leaves nothing behind, and `cluster up` brings it back. The last module
of its e2e lane (whose tests run in file order on one worker), since it stops the cluster the others use."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from localcluster import node
from localcluster.cluster import LocalCluster
from tests.kube import Kube, wait_for
from tests.realnode import NODE_LANE, process_alive, process_name, simple_pod, wait_pod_ready

pytestmark = NODE_LANE


def test_down_leaves_nothing_behind_and_up_comes_back(other_lanes_ended: None, node_to_itself: None, real: Kube,
                                                      local: LocalCluster) -> None:
    """Runs last in its lane, once the other lane's tests have ended: the cluster goes down (pods still running) and
    comes back up."""
    real.core.create_namespaced_pod("default", simple_pod("left-running", ["sleep", "infinity"]))
    wait_pod_ready(real, "default", "left-running")
    pids = {c: local.pid(c) for c in local.components}
    assert None not in pids.values(), pids  # every component ran: "not alive" below means something
    local.down()
    try:
        for component, pid in pids.items():
            assert not process_alive(pid), f"{component} still runs"
        assert node.leftover_iptables() == []
        assert subprocess.run(["ip", "link", "show", node.BRIDGE], capture_output=True).returncode != 0
        netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        assert "cni-" not in netns
        with open("/proc/self/mountinfo") as fh:
            mounts = [line.split()[4] for line in fh]
        assert not [m for m in mounts if m.startswith((str(local.node.layout.root), str(local.node.layout.run)))]
        assert node.NODE_IP not in subprocess.run(["ip", "addr", "show", "lo"], capture_output=True,
                                                  text=True).stdout
        # (this node's: the cluster of several nodes, if up, has shims of its own)
        def ours(proc: Path) -> bool:
            try:
                return str(local.node.layout.containerd_sock) in (proc / "cmdline").read_bytes().decode(errors="replace")
            except OSError:  # (gone meanwhile)
                return False

        shims = [p.name for p in Path("/proc").iterdir() if p.name.isdigit() and process_alive(int(p.name))
                 and process_name(int(p.name)).startswith("containerd-shim") and ours(p)]
        assert shims == []
    finally:
        started = time.monotonic()
        local.up(timeout=300)
        print(f"warm cluster up --real-node: {time.monotonic() - started:.1f} s")
    # It came back: every component runs again, as a new process; the node is Ready; a new pod runs and is Ready,
    # and resolves a Service's name through the cluster's DNS.
    again = {c: local.pid(c) for c in local.components}
    assert all(pid is not None and process_alive(pid) and pid != pids[c] for c, pid in again.items()), (pids, again)
    wait_for("the node to be Ready", lambda: all(
        any(c.type == "Ready" and c.status == "True" for c in n.status.conditions)
        for n in real.core.list_node().items), timeout=120)
    real.core.delete_namespaced_pod("left-running", "default", grace_period_seconds=0)
    real.core.create_namespaced_pod("default", simple_pod("came-back", ["sleep", "infinity"]))
    try:
        wait_pod_ready(real, "default", "came-back")
        ip = real.core.read_namespaced_service("kubernetes", "default").spec.cluster_ip
        resolved = wait_for("the kubernetes Service's name to resolve in the new pod", lambda: real.kubectl(
            "-n", "default", "exec", "came-back", "--", "getent", "hosts", "kubernetes.default.svc.cluster.local",
            check=False).stdout.split()[:1], timeout=60, interval=2)
        assert resolved == [ip]
    finally:
        real.core.delete_namespaced_pod("came-back", "default", grace_period_seconds=0)
