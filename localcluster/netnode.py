"""Several real nodes on one machine (``cluster up --real-node --nodes N``), and the faults a node can suffer.

Each node is what kind makes of a container, made of namespaces instead: a network namespace of its own
(its kubelet, containerd, CNI bridge ``cni0``, pod range and kube-proxy's iptables live there), joined to
this machine by a veth on the bridge ``po0``; a mount namespace of its own, where the paths the kubelet
does not let configure (``/var/log/pods``, ``/var/log/containers``) are the node's; and a cgroup parent of
its own, which holds the node's daemons and, as the kubelet's ``cgroupRoot``, its pods. What the nodes
share stays on the host: the control plane, the registry, CoreDNS and the volume provisioner.

Nothing a pod sends may leave the machine: a node's only link is its veth on ``po0``, and the host drops
whatever ``po0`` would forward elsewhere. Faults act on those pieces: power off kills every process in
the node's cgroup and drops its namespaces (a reboot clears tmpfs, mounts and iptables); a partition drops
all traffic on the node's link, both ways, inside the node's network namespace.
"""

from __future__ import annotations

import enum
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import time
from pathlib import Path

from . import node
from .node import (
    KUBELET_HEALTHZ_PORT,
    LOCAL_PATH_NAMESPACE,
    PROXY_HEALTHZ_PORT,
    REGISTRY_PORT,
    NodeError,
    NodeLayout,
    RealNode,
    _sh,
    outside_interfaces,
)
from .pki import NodeCerts

LINK_BRIDGE = "po0"
LINK_GATEWAY = "10.97.0.1"  # the host on the nodes' link: CoreDNS, the registry and the object store answer here
LINK_PREFIX = 24
LINK_BRIDGE_MAC = "02:50:4f:00:00:02"  # fixed, for the reason node.BRIDGE_MAC is
CLUSTER_CIDR = "10.244.0.0/16"
NODE_COMPONENTS = ("containerd", "kubelet", "kube-proxy")
HOST_COMPONENTS = ("registry", "versitygw", "coredns", "local-path-provisioner")
CGROUP_BASE = Path("/sys/fs/cgroup")
OWNER_FILE = Path("/run/playbook-operator/real-nodes.owner")
PARTITION_CHAIN = "PO-PARTITION"
MAX_NODES = 9  # node i is 10.97.0.1i on the link and 10.244.i.0/24 for its pods


class StoreAction(enum.StrEnum):
    """What `cluster objectstore` does to the object store beside the node(s)."""

    STOP = "stop"
    START = "start"
    BUCKET = "bucket"


class Fault(enum.StrEnum):
    POWEROFF = "poweroff"
    POWERON = "poweron"
    KUBELET_STOP = "kubelet-stop"
    KUBELET_START = "kubelet-start"
    PARTITION = "partition"
    HEAL = "heal"


def _hierarchies() -> list[Path]:
    """The cgroup v1 hierarchies (and the unified one) a node's cgroup is made in. Like the one real node, several
    need cgroup v1 (the kubelet's cgroupfs driver with a cgroupRoot per node; freezer and memory for power and
    memory): on a machine with cgroup v2 only they cannot be made."""
    found = sorted(p for p in CGROUP_BASE.iterdir() if (p / "cgroup.procs").exists())
    if not {"freezer", "memory", "pids"} <= {p.name for p in found}:
        raise NodeError(f"several real nodes need cgroup v1's freezer, memory and pids hierarchies under {CGROUP_BASE}; "
                        "this machine has " + (", ".join(p.name for p in found) or "none"))
    return found


class NetNode(RealNode):
    """Node ``index`` (1-based) of a cluster's several: its addresses, namespaces, cgroup and processes."""

    def __init__(self, cluster: str, index: int, cluster_root: Path, kubeconfig: Path, ca_crt: Path, pki) -> None:
        super().__init__(cluster, cluster_root, kubeconfig, ca_crt, pki)
        self.index = index
        self.name = f"{cluster}-node{index}"
        self.id = f"n{index}"
        self.layout = NodeLayout(f"{cluster}-{self.id}", cluster_root / "nodes" / self.id)
        self.certs = NodeCerts(self.layout.root / "pki")
        self.ip = node_ip(index)
        self.pod_cidr = f"10.244.{index}.0/24"
        self.cluster_cidr = CLUSTER_CIDR
        self.gateway = f"10.244.{index}.1"
        self.dns = LINK_GATEWAY
        self.registry = f"{LINK_GATEWAY}:{REGISTRY_PORT}"
        self.healthz_address = self.ip  # the host checks it from outside the node's namespace
        self.cgroup_root = f"/po-{cluster}-{self.id}"
        self.host_link = f"po-{self.id}"
        self.netns_under_state = True  # the machine's /var/run/netns is not the node's

    # ------------------------------------------------------------- namespaces
    # Both are files in a directory of ours, not /run/netns: `ip netns add` makes /run/netns a mount of itself,
    # which hides the pod namespaces another node's containerd mounted there (it then cannot remove them).
    @property
    def net_ns(self) -> Path:
        return ns_holder() / f"{self.cluster}-{self.id}.net"

    @property
    def mount_ns(self) -> Path:
        return ns_holder() / f"{self.cluster}-{self.id}.mnt"

    def in_netns(self, *cmd: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return _sh("nsenter", f"--net={self.net_ns}", "--", *cmd, check=check)

    def netns_exists(self) -> bool:
        return _mounted(self.net_ns)

    def setup(self, peers: list[NetNode]) -> None:
        """Network namespace and link, routes to the other nodes' pods, mount namespace and cgroup."""
        _hold_ns_files()
        if not self.netns_exists():
            self.net_ns.touch()
            _sh("unshare", f"--net={self.net_ns}", "true")
        if _sh("ip", "link", "show", self.host_link, check=False).returncode != 0:
            _sh("ip", "link", "add", self.host_link, "type", "veth", "peer", "name", "eth0", "netns", str(self.net_ns))
        _sh("ip", "link", "set", self.host_link, "master", LINK_BRIDGE, "up")
        self.in_netns("ip", "link", "set", "lo", "up")
        if f'"{self.ip}"' not in self.in_netns("ip", "-j", "addr", "show", "dev", "eth0").stdout:
            self.in_netns("ip", "addr", "add", f"{self.ip}/{LINK_PREFIX}", "dev", "eth0")
        self.in_netns("ip", "link", "set", "eth0", "up")
        self.in_netns("ip", "route", "replace", "default", "via", LINK_GATEWAY)
        for peer in peers:
            if peer is not self:
                self.in_netns("ip", "route", "replace", peer.pod_cidr, "via", peer.ip)
        # (bridged pod traffic passes kube-proxy's rules only with br_netfilter, as on the one node)
        for key, value in (("net/ipv4/ip_forward", "1"), ("net/bridge/bridge-nf-call-iptables", "1")):
            if Path("/proc/sys", key).exists():
                self.in_netns("sysctl", "-qw", f"{key.replace('/', '.')}={value}")
        self._setup_mount_ns()
        self._setup_cgroup()

    def _setup_mount_ns(self) -> None:
        if _mounted(self.mount_ns):
            return
        self.mount_ns.touch()
        _sh("unshare", f"--mount={self.mount_ns}", "--propagation", "slave", "true")
        # The new namespace starts as a copy of this machine's mounts: the copies of other nodes' namespace files,
        # pod namespaces and container mounts would keep them alive after their node is gone.
        foreign = (str(ns_holder()), "/run/netns/", "/var/run/netns/", "/run/playbook-operator/",
                   str(self.layout.root.parent.parent.parent) + "/")
        _sh("nsenter", f"--mount={self.mount_ns}", "--", "sh", "-c",
            "awk '{print $5}' /proc/self/mountinfo | grep -E " + shlex.quote(
                "^(" + "|".join(re.escape(f) for f in foreign) + ")") + " | sort -r | xargs -r -n1 umount -l",
            check=False)
        for path in ("/var/log/pods", "/var/log/containers"):
            own = self.layout.root / "host" / path.strip("/")
            own.mkdir(parents=True, exist_ok=True)
            Path(path).mkdir(parents=True, exist_ok=True)
            _sh("nsenter", f"--mount={self.mount_ns}", "--", "mount", "--bind", str(own), path)

    def _setup_cgroup(self) -> None:
        for h in _hierarchies():
            for sub in ("", "system"):
                d = h / self.cgroup_root.strip("/") / sub
                d.mkdir(parents=True, exist_ok=True)
                if h.name == "cpuset":
                    for f in ("cpuset.cpus", "cpuset.mems"):
                        if not (d / f).read_text().strip():
                            (d / f).write_text((h / f).read_text())

    def wrap(self, argv: list[str]) -> list[str]:
        """A daemon of the node: it and what it forks (shims, CNI plugins) join the node's cgroup (a write that fails
        ends the start), then enter its namespaces."""
        joins = "; ".join(f"echo $$ > {shlex.quote(str(h / self.cgroup_root.strip('/') / 'system' / 'cgroup.procs'))}"
                          for h in _hierarchies())
        return ["sh", "-ec", f"{joins}; exec nsenter --net={shlex.quote(str(self.net_ns))} "
                f"--mount={shlex.quote(str(self.mount_ns))} -- " + shlex.join(argv)]

    def owns(self, pid: int) -> bool:
        """Whether a process is in the node's cgroup (what a power cut kills)."""
        try:
            return f":{self.cgroup_root}/" in Path(f"/proc/{pid}/cgroup").read_text()
        except OSError:
            return False

    def pids(self) -> set[int]:
        """Every process in the node's cgroup (daemons, shims, containers)."""
        found: set[int] = set()
        for h in _hierarchies():
            root = h / self.cgroup_root.strip("/")
            if not root.exists():
                continue
            for procs in root.rglob("cgroup.procs"):
                try:
                    found.update(int(x) for x in procs.read_text().split())
                except (OSError, ValueError):
                    pass
        return found

    def kill_all(self, timeout: float = 15.0) -> int:
        """SIGKILL to every process of the node, frozen first so that none forks meanwhile."""
        freezer = CGROUP_BASE / "freezer" / self.cgroup_root.strip("/") / "freezer.state"
        if freezer.exists():
            freezer.write_text("FROZEN")
        killed = 0
        deadline = time.monotonic() + timeout
        try:
            while (pids := self.pids()) and time.monotonic() < deadline:
                for pid in pids:
                    try:
                        os.kill(pid, signal.SIGKILL)
                        killed += 1
                    except ProcessLookupError:
                        pass
                if freezer.exists():
                    freezer.write_text("THAWED")  # killed processes die only once thawed
                time.sleep(0.1)
        finally:
            if freezer.exists():
                freezer.write_text("THAWED")
        if self.pids():
            raise NodeError(f"{self.name}: processes still alive after SIGKILL: {sorted(self.pids())}")
        return killed

    def teardown(self) -> list[str]:
        """What a power cut and a reboot clear: processes, mounts, tmpfs state, the namespaces and the link."""
        done = []
        if self.kill_all():
            done.append(f"{self.name} processes")
        if _mounted(self.mount_ns):
            _sh("umount", "-l", str(self.mount_ns), check=False)
            done.append(f"{self.name} mounts")
        self.mount_ns.unlink(missing_ok=True)
        _unmount_below(self.layout.run)
        shutil.rmtree(self.layout.run, ignore_errors=True)  # containerd's and runc's state, sockets, IPAM leases
        _sh("ip", "link", "delete", self.host_link, check=False)
        if _mounted(self.net_ns):
            _sh("umount", str(self.net_ns), check=False)
            done.append(f"{self.name} network")
        self.net_ns.unlink(missing_ok=True)
        for h in _hierarchies():
            root = h / self.cgroup_root.strip("/")
            if not root.exists():
                continue
            for d in sorted((p for p in root.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
                _rmdir(d)  # deepest first: a cgroup goes once it has no children and no processes
            _rmdir(root)
        return done

    # ------------------------------------------------------------- faults inside the namespace
    def partition(self) -> None:
        """Drops everything on the node's link, both ways: the API server, the other nodes and their pods,
        DNS and the registry are all behind it. Established connections stall, as on a cut cable."""
        if self.partitioned():
            return
        self.in_netns("iptables", "-N", PARTITION_CHAIN)
        self.in_netns("iptables", "-A", PARTITION_CHAIN, "-i", "eth0", "-j", "DROP")
        self.in_netns("iptables", "-A", PARTITION_CHAIN, "-o", "eth0", "-j", "DROP")
        for chain in ("INPUT", "OUTPUT", "FORWARD"):
            self.in_netns("iptables", "-I", chain, "1", "-j", PARTITION_CHAIN)

    def heal(self) -> None:
        for chain in ("INPUT", "OUTPUT", "FORWARD"):
            while self.in_netns("iptables", "-D", chain, "-j", PARTITION_CHAIN, check=False).returncode == 0:
                pass
        self.in_netns("iptables", "-F", PARTITION_CHAIN, check=False)
        self.in_netns("iptables", "-X", PARTITION_CHAIN, check=False)

    def partitioned(self) -> bool:
        return self.netns_exists() and self.in_netns("iptables", "-S", PARTITION_CHAIN, check=False).returncode == 0

    # ------------------------------------------------------------- processes
    def healthy(self, component: str, get) -> bool | None:
        urls = {"kubelet": f"http://{self.ip}:{KUBELET_HEALTHZ_PORT}/healthz",
                "kube-proxy": f"http://{self.ip}:{PROXY_HEALTHZ_PORT}/healthz"}
        if component in urls:
            return get(urls[component])[0] == 200
        if component == "containerd":
            return self.ctr("version", check=False, timeout=5).returncode == 0
        return None

    def memory_bytes(self) -> int | None:
        """What the node uses now: its daemons, shims and pods, as the kubelet counts a working set (the memory
        cgroup's usage without the page cache it could drop, such as what image imports read)."""
        d = CGROUP_BASE / "memory" / self.cgroup_root.strip("/")
        try:
            usage = int((d / "memory.usage_in_bytes").read_text())
            stat = dict(line.split() for line in (d / "memory.stat").read_text().splitlines())
        except (OSError, ValueError):
            return None
        return max(0, usage - int(stat.get("total_inactive_file", 0)))


def node_ip(index: int) -> str:
    return f"10.97.0.{10 + index}"


def ns_holder() -> Path:
    return node.RUN_BASE / "nsfs"


def _hold_ns_files() -> None:
    """A namespace file can only be bind-mounted where propagation is private: a directory that is a mount of its own."""
    holder = ns_holder()
    holder.mkdir(parents=True, exist_ok=True)
    if not _mounted(holder):
        _sh("mount", "--bind", str(holder), str(holder))
        _sh("mount", "--make-private", str(holder))


def _rmdir(path: Path) -> None:
    try:
        path.rmdir()
    except OSError:
        pass


def _mounted(path: Path) -> bool:
    with open("/proc/self/mountinfo") as fh:
        return any(line.split()[4] == str(path) for line in fh)


def _unmount_below(path: Path) -> None:
    prefix = str(path) + "/"
    with open("/proc/self/mountinfo") as fh:
        points = [line.split()[4] for line in fh if line.split()[4].startswith(prefix)]
    for point in sorted(points, key=len, reverse=True):
        _sh("umount", "-l", point, check=False)


class HostLink:
    """The host's side of the nodes: the bridge they hang on, routes to their pods, the firewall."""

    def __init__(self, cluster: str, root: Path) -> None:
        self.cluster = cluster
        self.state_file = root / "nodes" / "host.json"

    def firewall_rules(self) -> list[list[str]]:
        rules = [["FORWARD", "-i", LINK_BRIDGE, "!", "-o", LINK_BRIDGE, "-j", "DROP"]]
        rules += [["FORWARD", "-i", LINK_BRIDGE, "-o", dev, "-j", "DROP"] for dev in outside_interfaces()]
        return rules

    def claim(self) -> None:
        node.claim(OWNER_FILE, LINK_BRIDGE, self.cluster, "several real nodes")

    def setup(self, nodes: list[NetNode]) -> None:
        self.claim()
        if _sh("ip", "link", "show", LINK_BRIDGE, check=False).returncode != 0:
            _sh("ip", "link", "add", LINK_BRIDGE, "type", "bridge")
        _sh("ip", "link", "set", LINK_BRIDGE, "address", LINK_BRIDGE_MAC)
        if f'"{LINK_GATEWAY}"' not in _sh("ip", "-j", "addr", "show", "dev", LINK_BRIDGE).stdout:
            _sh("ip", "addr", "add", f"{LINK_GATEWAY}/{LINK_PREFIX}", "dev", LINK_BRIDGE)
        _sh("ip", "link", "set", LINK_BRIDGE, "up")
        for rule in reversed(self.firewall_rules()):
            if _sh("iptables", "-C", *rule, check=False).returncode != 0:
                _sh("iptables", "-I", *rule)
        self.state_file.parent.mkdir(parents=True, exist_ok=True)
        self.state_file.touch()  # (what `down` finds the nodes by, should the cluster's state be lost)
        for n in nodes:
            _sh("ip", "route", "replace", n.pod_cidr, "via", n.ip, "dev", LINK_BRIDGE)

    def teardown(self, nodes: list[NetNode]) -> list[str]:
        done = []
        for n in nodes:
            done += n.teardown()
            _sh("ip", "route", "del", n.pod_cidr, check=False)
        if _sh("ip", "link", "show", LINK_BRIDGE, check=False).returncode == 0:
            _sh("ip", "link", "delete", LINK_BRIDGE, check=False)
            done.append(f"bridge {LINK_BRIDGE}")
        for rule in self.firewall_rules():
            while _sh("iptables", "-C", *rule, check=False).returncode == 0:
                _sh("iptables", "-D", *rule, check=False)
        holder = ns_holder()
        if _mounted(holder) and not any(holder.iterdir()):
            _sh("umount", str(holder), check=False)
            _rmdir(holder)
        try:
            if OWNER_FILE.read_text().strip() == self.cluster:
                OWNER_FILE.unlink()
        except FileNotFoundError:
            pass
        self.state_file.unlink(missing_ok=True)
        return done


def bootstrap_manifests(shared: RealNode, nodes: list[NetNode]) -> str:
    """The provisioner's objects, each node's volumes in a directory of its own."""
    docs = [json.loads(d) for d in shared.bootstrap_manifests().split("\n---\n")]
    for doc in docs:
        if doc["kind"] == "ConfigMap" and doc["metadata"]["namespace"] == LOCAL_PATH_NAMESPACE:
            doc["data"]["config.json"] = json.dumps({"nodePathMap": [
                {"node": n.name, "paths": [str(n.layout.volumes)]} for n in nodes]})
    return "\n---\n".join(json.dumps(d) for d in docs)
