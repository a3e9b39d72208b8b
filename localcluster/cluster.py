"""Starts, stops and inspects one local control plane: etcd, kube-apiserver, kube-controller-manager,
kube-scheduler and kwok, each a plain process whose pid is recorded under the cluster's directory.
With ``--real-node`` kwok gives way to a real worker node (``node.py``): containerd, kubelet,
kube-proxy, CoreDNS and a volume provisioner, whose pods run real containers.

The processes run in their own sessions so they outlive the command that started them; ``down`` finds
them again by pid and checks the pid still runs the binary we started (pids get reused after a reboot).
"""

from __future__ import annotations

import base64
import fcntl
import ipaddress
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

from . import build, images, netnode, nodebuild, paths
from .netnode import LINK_GATEWAY, NetNode
from .node import (
    COREDNS_HEALTH_PORT,
    NODE_IP,
    OBJECTSTORE_BUCKET,
    OBJECTSTORE_PORT,
    REGISTRY_PORT,
    NodeError,
    NodeLayout,
    RealNode,
)
from .pki import Pki

DEFAULT_NAME = "default"
NODE_COUNT = 3
START_ORDER = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
CONTROL_PLANE = START_ORDER[:4]
NODE_ORDER = ("containerd", "registry", "versitygw", "coredns", "kubelet", "kube-proxy", "local-path-provisioner")


def _say(msg: str) -> None:
    print(f"[cluster] {msg}", file=sys.stderr, flush=True)


class ClusterError(RuntimeError):
    pass


@dataclass
class Ports:
    etcd_client: int
    etcd_peer: int
    apiserver: int


@dataclass
class ComponentStatus:
    name: str
    pid: int | None
    running: bool
    healthy: bool | None
    log: Path


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        # Go's listeners set SO_REUSEADDR, so sockets in TIME_WAIT left by a killed process don't block them
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


class LocalCluster:
    def __init__(self, name: str = DEFAULT_NAME, real_node: bool | None = None, nodes: int | None = None) -> None:
        """real_node and nodes None: as the cluster was last started (kwok for a new one; one real node)."""
        self.name = name
        self.paths = paths.ClusterPaths.for_name(name)
        self.pki = Pki(self.paths.pki)
        state = self._load_state()
        self.real_node = state.get("real_node", False) if real_node is None else real_node
        self.node_count = (state.get("nodes", 1) if nodes is None else nodes) if self.real_node else 0
        self.node = RealNode(name, self.paths.root, self.paths.kubeconfig, self.pki.ca_crt, self.pki)
        # Several nodes: each in namespaces of its own; the services they share run on the host, on their link.
        self.nodes = [NetNode(name, i, self.paths.root, self.paths.kubeconfig, self.pki.ca_crt, self.pki)
                      for i in range(1, self.node_count + 1)] if self.several else []
        if self.several:
            self.node.layout = NodeLayout(f"{name}-host", self.paths.root / "nodes" / "host")
            self.node.dns = LINK_GATEWAY
            self.node.registry = f"{LINK_GATEWAY}:{REGISTRY_PORT}"
            self.node.objectstore = f"{LINK_GATEWAY}:{OBJECTSTORE_PORT}"
            self.node.coredns_health = f"{LINK_GATEWAY}:{COREDNS_HEALTH_PORT}"
            self.host_link = netnode.HostLink(name, self.paths.root)

    @property
    def several(self) -> bool:
        return self.real_node and self.node_count > 1

    @property
    def components(self) -> tuple[str, ...]:
        """What runs for this cluster, in start order: kwok's simulated nodes, a real node, or several."""
        if self.several:
            return CONTROL_PLANE + netnode.HOST_COMPONENTS + tuple(
                f"{n.id}/{c}" for n in self.nodes for c in netnode.NODE_COMPONENTS)
        return CONTROL_PLANE + (NODE_ORDER if self.real_node else ("kwok",))

    @property
    def host(self) -> str:
        # Pods reach the API server through the kubernetes Service, which cannot lead to loopback; several
        # nodes reach it on their link.
        if self.several:
            return LINK_GATEWAY
        return NODE_IP if self.real_node else "127.0.0.1"

    @property
    def service_cidr(self) -> str:
        # Several nodes' Services apart from the one node's: a pod's packet that leaves its node before the node's
        # kube-proxy has its rules (just powered on) must not reach the other cluster's Services on this host.
        return "10.0.1.0/24" if self.several else "10.0.0.0/24"

    def node_by_name(self, name: str) -> NetNode:
        for n in self.nodes:
            if name in (n.name, n.id):
                return n
        raise ClusterError(f"cluster {self.name!r} has no node {name!r}; its nodes: "
                           + (", ".join(n.name for n in self.nodes) or "none (cluster up --real-node --nodes N)"))

    # ----------------------------------------------------------------- bookkeeping
    @contextmanager
    def _locked(self) -> Iterator[None]:
        self.paths.root.mkdir(parents=True, exist_ok=True)
        with open(self.paths.lock, "w") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def _load_state(self) -> dict:
        try:
            return json.loads(self.paths.state_file.read_text())
        except (FileNotFoundError, ValueError):
            return {}

    def _load_ports(self) -> Ports | None:
        try:
            return Ports(**self._load_state()["ports"])
        except (KeyError, TypeError):
            return None

    def _save_ports(self, ports: Ports) -> None:
        state = {"ports": asdict(ports), "versions": paths.version_key(), "real_node": self.real_node,
                 "nodes": self.node_count}
        self.paths.state_file.write_text(json.dumps(state, indent=2) + "\n")

    def _pid_file(self, component: str) -> Path:
        return self.paths.pids / f"{component.replace('/', '-')}.pid"

    def _log_file(self, component: str) -> Path:
        return self.paths.logs / f"{component.replace('/', '-')}.log"

    def _node_of(self, component: str) -> tuple[NetNode | None, str]:
        """``n2/kubelet`` is node 2's kubelet; a name without a node is the host's."""
        if "/" not in component:
            return None, component
        nid, what = component.split("/", 1)
        return self.node_by_name(nid), what

    def pid(self, component: str) -> int | None:
        """The recorded pid, if that process is alive and still runs our binary."""
        try:
            pid = int(self._pid_file(component).read_text().strip())
        except (FileNotFoundError, ValueError):
            return None
        try:
            exe = os.readlink(f"/proc/{pid}/exe")
        except OSError:
            return None
        if Path(exe.removesuffix(" (deleted)")).name != component.rsplit("/", 1)[-1]:
            return None
        try:
            with open(f"/proc/{pid}/stat") as fh:
                if fh.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return None
        except OSError:
            return None
        return pid

    # ----------------------------------------------------------------- health
    def _ssl_context(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(self.pki.ca_crt))
        ctx.load_cert_chain(str(self.pki.admin_crt), str(self.pki.admin_key))
        return ctx

    def _get(self, url: str, ctx: ssl.SSLContext | None = None, timeout: float = 2.0) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(url, context=ctx, timeout=timeout) as resp:
                return resp.status, resp.read().decode(errors="replace")
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode(errors="replace")
        except (urllib.error.URLError, OSError):
            return 0, ""

    def etcd_healthy(self, ports: Ports) -> bool:
        code, body = self._get(f"http://127.0.0.1:{ports.etcd_client}/health")
        return code == 200 and '"health":"true"' in body.replace(" ", "")

    def apiserver_ready(self, ports: Ports) -> bool:
        code, _ = self._get(f"https://{self.host}:{ports.apiserver}/readyz", self._ssl_context())
        return code == 200

    def node_healthy(self, component: str) -> bool | None:
        from . import node as n

        net, what = self._node_of(component)
        if net is not None:
            return net.healthy(what, self._get)
        urls = {"kubelet": f"http://127.0.0.1:{n.KUBELET_HEALTHZ_PORT}/healthz",
                "kube-proxy": f"http://127.0.0.1:{n.PROXY_HEALTHZ_PORT}/healthz",
                "coredns": f"http://{self.node.coredns_health}/health",
                "registry": f"http://{self.node.registry}/v2/",
                "versitygw": f"http://{self.node.objectstore}/health"}
        if component in urls:
            return self._get(urls[component])[0] == 200
        if component == "containerd":
            return self.node.ctr("version", check=False, timeout=5).returncode == 0
        return None

    def _wait(self, what: str, check: Callable[[], bool], timeout: float, component: str | None = None) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if check():
                return
            if component and self.pid(component) is None:
                raise ClusterError(f"{component} exited while starting; see {self._log_file(component)}:\n"
                                   + _tail(self._log_file(component)))
            time.sleep(0.2)
        hint = f"; see {self._log_file(component)}" if component else ""
        raise ClusterError(f"timed out after {timeout:.0f} s waiting for {what}{hint}")

    # ----------------------------------------------------------------- processes
    def _argv(self, component: str, ports: Ports) -> list[str]:
        p, pki, kubeconfig = self.paths, self.pki, str(self.paths.kubeconfig)
        binp = str(build.binary(component))
        if component == "etcd":
            peer = f"http://127.0.0.1:{ports.etcd_peer}"
            client = f"http://127.0.0.1:{ports.etcd_client}"
            return [binp, "--name", "local", "--data-dir", str(p.etcd_data),
                    "--listen-client-urls", client, "--advertise-client-urls", client,
                    "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                    "--initial-cluster", f"local={peer}",
                    # dev/test data only: durability is not worth the fsync latency here
                    "--unsafe-no-fsync", "--log-level", "warn"]
        if component == "kube-apiserver":
            real = [f"--kubelet-client-certificate={pki.admin_crt}", f"--kubelet-client-key={pki.admin_key}",
                    # the kubelet is reached at the node's address, not by its name
                    "--kubelet-preferred-address-types=InternalIP"] if self.real_node else []
            return [binp, f"--etcd-servers=http://127.0.0.1:{ports.etcd_client}",
                    f"--bind-address={self.host}", f"--advertise-address={self.host}", *real,
                    f"--secure-port={ports.apiserver}",
                    f"--tls-cert-file={pki.apiserver_crt}", f"--tls-private-key-file={pki.apiserver_key}",
                    f"--client-ca-file={pki.ca_crt}",
                    "--service-account-issuer=https://kubernetes.default.svc",
                    f"--service-account-key-file={pki.sa_pub}",
                    f"--service-account-signing-key-file={pki.sa_key}",
                    f"--service-cluster-ip-range={self.service_cidr}",
                    "--authorization-mode=Node,RBAC", "--allow-privileged=true"]
        common = [f"--kubeconfig={kubeconfig}", f"--authentication-kubeconfig={kubeconfig}",
                  f"--authorization-kubeconfig={kubeconfig}", "--leader-elect=false",
                  "--bind-address=127.0.0.1", "--secure-port=0"]
        if component == "kube-controller-manager":
            return [binp, *common,
                    f"--service-account-private-key-file={pki.sa_key}", f"--root-ca-file={pki.ca_crt}",
                    f"--cluster-signing-cert-file={pki.ca_crt}", f"--cluster-signing-key-file={pki.ca_key}",
                    "--use-service-account-credentials=true",
                    "--controllers=*,-nodeipam,-cloud-node-lifecycle,-service-lb-controller,-node-route-controller"]
        if component == "kube-scheduler":
            return [binp, *common]
        net, what = self._node_of(component)
        if net is not None:
            return net.wrap(net.argv(what))
        if component in NODE_ORDER:
            return self.node.argv(component)
        if component == "kwok":
            # Only its own fake nodes: --manage-all-nodes would take over a real node.
            return [binp, f"--kubeconfig={kubeconfig}",
                    "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
                    "--node-lease-duration-seconds=40", f"--config={build.stages_file()}"]
        raise ValueError(component)

    def _start(self, component: str, ports: Ports) -> int:
        self.paths.logs.mkdir(parents=True, exist_ok=True)
        self.paths.pids.mkdir(parents=True, exist_ok=True)
        log = open(self._log_file(component), "ab")
        log.write(f"\n==== {time.strftime('%Y-%m-%dT%H:%M:%S')} starting {component}\n".encode())
        log.flush()
        net, what = self._node_of(component)
        proc = subprocess.Popen(
            self._argv(component, ports),
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            cwd=self.paths.root, start_new_session=True,
            env=(net or self.node).env(what) if what in NODE_ORDER else None,
        )
        log.close()
        self._pid_file(component).write_text(f"{proc.pid}\n")
        if net is not None:
            # (the wrapper joins the node's cgroup, then becomes the daemon)
            deadline = time.monotonic() + 10
            while self.pid(component) is None and proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.05)
            if self.pid(component) is None or not net.owns(proc.pid):
                raise ClusterError(f"{component} did not start in {net.name}'s cgroup and namespaces; see "
                                   f"{self._log_file(component)}:\n" + _tail(self._log_file(component)))
        return proc.pid

    def _stop(self, component: str, timeout: float = 10.0) -> bool:
        pid = self.pid(component)
        if pid is None:
            self._pid_file(component).unlink(missing_ok=True)
            return False
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.pid(component) is not None:
            time.sleep(0.1)
        if self.pid(component) is not None:
            os.kill(pid, signal.SIGKILL)
            while self.pid(component) is not None:
                time.sleep(0.05)
        self._pid_file(component).unlink(missing_ok=True)
        return True

    # ----------------------------------------------------------------- kubeconfig and bootstrap
    def _write_kubeconfig(self, ports: Ports) -> None:
        def b64(path: Path) -> str:
            return base64.b64encode(path.read_bytes()).decode()

        cfg = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": f"local-{self.name}", "cluster": {
                "server": f"https://{self.host}:{ports.apiserver}",
                "certificate-authority-data": b64(self.pki.ca_crt)}}],
            "users": [{"name": "admin", "user": {
                "client-certificate-data": b64(self.pki.admin_crt),
                "client-key-data": b64(self.pki.admin_key)}}],
            "contexts": [{"name": f"local-{self.name}", "context": {
                "cluster": f"local-{self.name}", "user": "admin", "namespace": "default"}}],
            "current-context": f"local-{self.name}",
        }
        tmp = self.paths.kubeconfig.with_suffix(".tmp")
        tmp.write_text(json.dumps(cfg, indent=2) + "\n")
        tmp.chmod(0o600)
        tmp.rename(self.paths.kubeconfig)

    def kubectl(self, *args: str, input: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [str(build.binary("kubectl")), f"--kubeconfig={self.paths.kubeconfig}", *args],
            input=input, capture_output=True, text=True, timeout=60,
        )
        if check and proc.returncode != 0:
            raise ClusterError(f"kubectl {' '.join(args)} failed: {proc.stderr.strip()}")
        return proc

    def _nodes_manifest(self) -> str:
        docs = []
        for i in range(NODE_COUNT):
            name = f"kwok-node-{i}"
            docs.append(json.dumps({
                "apiVersion": "v1", "kind": "Node",
                "metadata": {"name": name,
                             "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
                             "labels": {"type": "kwok", "kubernetes.io/hostname": name,
                                        "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
                                        "topology.kubernetes.io/zone": f"zone-{i}"}},
                "status": {"allocatable": {"cpu": "32", "memory": "256Gi", "pods": "110"},
                           "capacity": {"cpu": "32", "memory": "256Gi", "pods": "110"}},
            }))
        return "\n---\n".join(docs)

    def _clear_stale_node_leases(self) -> None:
        # A new kwok process has a new holder identity: Leases left by an earlier one make its nodes
        # read-only (pods on them are skipped) until they expire, so drop them before kwok starts.
        self.kubectl("-n", "kube-node-lease", "delete", "leases", "--all", "--wait=false", check=False)

    def _bootstrap(self) -> None:
        if self.several:
            self.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-",
                         input=netnode.bootstrap_manifests(self.node, self.nodes))
            return
        if self.real_node:
            self.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", input=self.node.bootstrap_manifests())
            return
        self.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(build.storage_class_file()))
        self.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", input=self._nodes_manifest())

    def _usable(self) -> bool:
        sa = self.kubectl("-n", "default", "get", "serviceaccount", "default", "-o", "name", check=False)
        if sa.returncode != 0:
            return False
        nodes = self.kubectl("get", "nodes", "-o",
                             "jsonpath={range .items[*]}{.status.conditions[?(@.type=='Ready')].status}{' '}{end}",
                             check=False)
        want = max(1, self.node_count) if self.real_node else NODE_COUNT
        return nodes.returncode == 0 and nodes.stdout.split().count("True") >= want

    # ----------------------------------------------------------------- public commands
    def running(self) -> bool:
        ports = self._load_ports()
        state = self._load_state()
        return (ports is not None and state.get("real_node", False) == self.real_node
                and state.get("nodes", 1 if self.real_node else 0) == self.node_count
                and all(self.pid(c) for c in self.components)
                and self.paths.kubeconfig.exists() and self.apiserver_ready(ports))

    def up(self, timeout: float = 180.0) -> float:
        """Brings the cluster up (building binaries the first time); returns seconds taken."""
        start = time.monotonic()
        with self._locked():
            if self.running():
                return time.monotonic() - start
            state = self._load_state()
            recorded = state.get("real_node")
            if recorded is not None and any(self.pid(c) for c in START_ORDER + NODE_ORDER) and (
                    recorded != self.real_node or state.get("nodes", 1 if recorded else 0) != self.node_count):
                shape = f"{state.get('nodes', 1)} real node(s)" if recorded else "kwok's nodes"
                raise ClusterError(f"cluster {self.name!r} runs with {shape}; "
                                   f"stop it first: playbook-operator cluster --name {self.name} down")
            if self.real_node:
                # Image builds mostly wait on Debian's mirror and dpkg, the Go builds on the CPU: a cold
                # first start overlaps them.
                with ThreadPoolExecutor(max_workers=1) as pool:
                    built = pool.submit(images.build_all)
                    build.build()
                    nodebuild.build_node()
                    nodebuild.build_registry()
                    nodebuild.build_versitygw()
                    archives = built.result()
            else:
                build.build()
            if not self.pki.exists():
                self.pki.generate()
            kubernetes_ip = str(ipaddress.ip_network(self.service_cidr)[1])  # the kubernetes Service's
            if self.real_node and not all(self.pki.serves(a) for a in (self.host, kubernetes_ip)):
                raise ClusterError(f"cluster {self.name!r} was made before this shape of nodes existed (its certificate "
                                   f"does not name {self.host}); remove it with: playbook-operator cluster "
                                   f"--name {self.name} down --purge")
            if self.several:
                # The link, each node's namespaces and cgroup, and the firewall, before the API server binds.
                self.host_link.setup(self.nodes)
                for n in self.nodes:
                    n.setup(self.nodes)
            elif self.real_node:
                # Addresses, bridge and the firewall rule come before the API server binds and before any pod.
                self.node.setup_network()
            ports = self._load_ports()
            live = {c: self.pid(c) for c in self.components}
            if ports is None or (not live["etcd"] and not (_port_free(ports.etcd_client) and _port_free(ports.etcd_peer))) \
                    or (not live["kube-apiserver"] and not _port_free(ports.apiserver)):
                # First start, or our old ports were taken while we were down: pick new ones. The data
                # stays; only the kubeconfig changes.
                for c in self.components:
                    self._stop(c)
                ports = Ports(_free_port(), _free_port(), _free_port())
                live = dict.fromkeys(self.components)
            self._save_ports(ports)
            self._write_kubeconfig(ports)

            if not live["etcd"]:
                self._start("etcd", ports)
            self._wait("etcd to be healthy", lambda: self.etcd_healthy(ports), 30, "etcd")
            if not live["kube-apiserver"]:
                self._start("kube-apiserver", ports)
            self._wait("kube-apiserver /readyz", lambda: self.apiserver_ready(ports), 60, "kube-apiserver")
            for c in ("kube-controller-manager", "kube-scheduler"):
                if not live[c]:
                    self._start(c, ports)
            self._bootstrap()
            if self.several:
                self._start_nodes(ports, live, archives)
            elif self.real_node:
                self._start_node(ports, live, archives)
            elif not live["kwok"]:
                self._clear_stale_node_leases()
                self._start("kwok", ports)
            last = (f"{self.nodes[0].id}/kubelet" if self.several else "kubelet") if self.real_node else "kwok"
            self._wait("the cluster to be usable (default ServiceAccount, Ready nodes)", self._usable,
                       max(10.0, timeout - (time.monotonic() - start)), last)
            return time.monotonic() - start

    def _start_node(self, ports: Ports, live: dict[str, int | None], archives: dict[str, Path]) -> None:
        self.node.write_config(f"https://{self.host}:{ports.apiserver}")
        if not live["containerd"]:
            self._start("containerd", ports)
        self._wait("containerd", lambda: self.node_healthy("containerd") is True, 30, "containerd")
        self.node.import_images(archives, log=_say)
        if not live["registry"]:
            self._start("registry", ports)
        self._wait("the node's registry", lambda: self.node_healthy("registry") is True, 30, "registry")
        self.node.push_images(images.registry_archives(), log=_say)
        self._start_objectstore(ports, live)
        for c in ("coredns", "kubelet", "kube-proxy", "local-path-provisioner"):
            if not live[c]:
                self._start(c, ports)

    def _start_nodes(self, ports: Ports, live: dict[str, int | None], archives: dict[str, Path]) -> None:
        """Several nodes: each node's containerd with the images, the shared services, then the kubelets."""
        url = f"https://{self.host}:{ports.apiserver}"
        self.node.write_host_config()
        for n in self.nodes:
            n.write_node_config(url)
            self._start_runtime(n, live, archives)
        if not live["registry"]:
            self._start("registry", ports)
        self._wait("the nodes' registry", lambda: self.node_healthy("registry") is True, 30, "registry")
        self.nodes[0].push_images(images.registry_archives(), log=_say)
        self._start_objectstore(ports, live)
        for c in ("coredns", "local-path-provisioner"):
            if not live[c]:
                self._start(c, ports)
        for n in self.nodes:
            for c in ("kubelet", "kube-proxy"):
                if not live.get(f"{n.id}/{c}"):
                    self._start(f"{n.id}/{c}", ports)

    def _start_objectstore(self, ports: Ports, live: dict[str, int | None]) -> None:
        if not live["versitygw"]:
            self._start("versitygw", ports)
        self._wait("the node's object store", lambda: self.node_healthy("versitygw") is True, 30, "versitygw")
        self.node.create_bucket(OBJECTSTORE_BUCKET)

    def _start_runtime(self, n: NetNode, live: dict[str, int | None], archives: dict[str, Path]) -> None:
        comp = f"{n.id}/containerd"
        if not live.get(comp):
            self._start(comp, self._load_ports())
        self._wait(f"{n.name}'s containerd", lambda: self.node_healthy(comp) is True, 30, comp)
        n.import_images(archives, log=lambda m: _say(f"{n.name}: {m}"))

    def load_images(self, include_operator: bool) -> dict[str, Path]:
        """Builds (when their inputs changed) and imports the local images into the running node(s)."""
        runtimes = [f"{n.id}/containerd" for n in self.nodes] if self.several else ["containerd"]
        if not self.real_node or not all(self.pid(c) for c in runtimes):
            raise ClusterError(f"cluster {self.name!r} has no running real node (cluster up --real-node)")
        archives = images.build_all(include_operator=include_operator)
        for n in self.nodes or [self.node]:
            n.import_images(archives, log=_say)
        return archives

    # ----------------------------------------------------------------- faults
    def objectstore(self, action: netnode.StoreAction, bucket: str = "") -> str:
        """The object store's outage (stop, start) or a new bucket in it; says what was done."""
        ports = self._load_ports()
        if not self.real_node or ports is None:
            raise ClusterError(f"cluster {self.name!r} has no running real node (cluster up --real-node)")
        with self._locked():
            if action is netnode.StoreAction.STOP:
                return "object store stopped" if self._stop("versitygw") else "the object store was not running"
            if action is netnode.StoreAction.START:
                self._start_objectstore(ports, {"versitygw": self.pid("versitygw")})
                return f"object store running on {self.node.objectstore}"
            self.node.create_bucket(bucket)
            return f"bucket {bucket} in the object store at {self.node.objectstore}"

    def fault(self, node: str, fault: netnode.Fault) -> str:
        """One of a node's faults, or its repair; says what was done."""
        n = self.node_by_name(node)
        ports = self._load_ports()
        if ports is None:
            raise ClusterError(f"cluster {self.name!r} is not running")
        with self._locked():
            if fault is netnode.Fault.POWEROFF:
                done = n.teardown()
                for c in netnode.NODE_COMPONENTS:
                    self._pid_file(f"{n.id}/{c}").unlink(missing_ok=True)
                return f"{n.name} powered off: " + (", ".join(done) or "it was off already")
            if fault is not netnode.Fault.POWERON and not n.netns_exists():
                raise ClusterError(f"{n.name} is powered off: power it on first "
                                   f"(playbook-operator cluster --name {self.name} node {n.name} poweron)")
            if fault is netnode.Fault.POWERON:
                n.setup(self.nodes)
                n.write_node_config(f"https://{self.host}:{ports.apiserver}")
                live = {c: self.pid(c) for c in self.components}
                self._start_runtime(n, live, {})
                for c in ("kubelet", "kube-proxy"):
                    if not live[f"{n.id}/{c}"]:
                        self._start(f"{n.id}/{c}", ports)
                return f"{n.name} powered on"
            if fault is netnode.Fault.KUBELET_STOP:
                pid = self.pid(f"{n.id}/kubelet")
                if pid:
                    os.kill(pid, signal.SIGKILL)
                self._pid_file(f"{n.id}/kubelet").unlink(missing_ok=True)
                return f"{n.name}'s kubelet killed; its containers run on"
            if fault is netnode.Fault.KUBELET_START:
                if not self.pid(f"{n.id}/kubelet"):
                    self._start(f"{n.id}/kubelet", ports)
                return f"{n.name}'s kubelet started"
            if fault is netnode.Fault.PARTITION:
                n.partition()
                return f"{n.name} cut off from the API server and the other nodes"
            n.heal()
            return f"{n.name} reconnected"

    def down(self, purge: bool = False) -> list[str]:
        """Stops every component we started; with purge, removes the cluster's data too."""
        stopped = []
        with self._locked():
            if self.several or self.host_link_state():
                for c in netnode.HOST_COMPONENTS:
                    if self._stop(c):
                        stopped.append(c)
                nodes = self.nodes or self._recorded_nodes()
                for n in nodes:
                    for c in ("kube-proxy", "kubelet", "containerd"):  # (any that left the node's cgroup, too)
                        if self._stop(f"{n.id}/{c}"):
                            stopped.append(f"{n.id}/{c}")
                stopped += netnode.HostLink(self.name, self.paths.root).teardown(nodes)
            else:
                stopped += self._down_node()
            for c in reversed(START_ORDER):
                if self._stop(c):
                    stopped.append(c)
        if purge and self.paths.root.exists():
            shutil.rmtree(self.paths.root)
        return stopped

    def _down_node(self) -> list[str]:
        """The one real node's processes, containers, mounts and network."""
        stopped = []
        node_state = self.node.layout.state_file.exists() or self.real_node
        for c in ("local-path-provisioner", "kube-proxy", "kubelet", "coredns", "versitygw", "registry"):
            if self._stop(c):
                stopped.append(c)
        if node_state:
                # Containers outlive the kubelet and their shims outlive containerd.
                if self.node.kill_containers():
                    stopped.append("containers")
                if self._stop("containerd"):
                    stopped.append("containerd")
                self.node.kill_shims()
                if self.node.unmount_all():
                    stopped.append("mounts")
                stopped += self.node.teardown_network()
        return stopped

    def host_link_state(self) -> bool:
        return (self.paths.root / "nodes" / "host.json").exists()

    def _recorded_nodes(self) -> list[NetNode]:
        found = sorted(int(p.name[1:]) for p in (self.paths.root / "nodes").glob("n[0-9]*") if p.name[1:].isdigit())
        return [NetNode(self.name, i, self.paths.root, self.paths.kubeconfig, self.pki.ca_crt, self.pki) for i in found]

    def status(self) -> list[ComponentStatus]:
        ports = self._load_ports()
        result = []
        for c in self.components:
            pid = self.pid(c)
            healthy: bool | None = None
            if pid and ports:
                if c == "etcd":
                    healthy = self.etcd_healthy(ports)
                elif c == "kube-apiserver":
                    healthy = self.apiserver_ready(ports)
                elif c.rsplit("/", 1)[-1] in NODE_ORDER:
                    healthy = self.node_healthy(c)
            result.append(ComponentStatus(c, pid, pid is not None, healthy, self._log_file(c)))
        return result

    def env_lines(self) -> list[str]:
        return [f"export KUBECONFIG={self.paths.kubeconfig}",
                f"export PATH={build.binary('kubectl').parent}:$PATH"]


def _tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return "(no log)"


def main(argv: list[str]) -> int:
    """`playbook-operator cluster up|down|status|env|build|images|node|objectstore`."""
    import argparse

    parser = argparse.ArgumentParser(prog="playbook-operator cluster",
                                     description="A local Kubernetes control plane (etcd, kube-apiserver, "
                                                 "controller-manager, scheduler, kwok) on loopback.")
    parser.add_argument("--name", default=os.environ.get("PLAYBOOK_OPERATOR_CLUSTER", DEFAULT_NAME),
                        help="cluster name; each has its own data directory (default: %(default)s)")
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="build (first time), start, wait until usable; idempotent")
    up.add_argument("--timeout", type=float, default=180.0)
    up.add_argument("--real-node", action="store_true",
                    help="a real worker node (containerd, kubelet, kube-proxy, CoreDNS, local-path volumes) instead "
                         "of kwok's simulated ones: pods run real containers")
    up.add_argument("--nodes", type=int, default=None, metavar="N",
                    help=f"with --real-node: N (up to {netnode.MAX_NODES}) real nodes, each in network and mount "
                         "namespaces of its own (default: as the cluster was started, else 1, on the host itself)")
    imgs = sub.add_parser("images", help="build (when changed) and import the local images into the real node")
    imgs.add_argument("--operator", action="store_true", help="also the operator's own image (for make deploy)")
    down = sub.add_parser("down", help="stop every component started for this cluster")
    down.add_argument("--purge", action="store_true", help="also delete the cluster's data")
    sub.add_parser("status", help="each component, its pid, health and log file")
    sub.add_parser("env", help="print shell exports for KUBECONFIG and the built kubectl")
    sub.add_parser("build", help="only build (or verify) the cached binaries")
    fault = sub.add_parser("node", help="a fault on one of several real nodes, or its repair",
                           description="poweroff: kubelet, containerd and every container stop at once, and what a "
                                       "reboot clears goes; kubelet-stop: the kubelet dies, its containers run on; "
                                       "partition: all the node's traffic to the API server and the other nodes is "
                                       "dropped, both ways. For a drain, use kubectl drain.")
    fault.add_argument("node_name", metavar="NODE", help="a node's name (kubectl get nodes) or n1, n2, ...")
    fault.add_argument("fault", choices=[f.value for f in netnode.Fault])
    store = sub.add_parser("objectstore", help="the object store beside the node: stop or start it (an outage), or "
                                               "make a bucket")
    store.add_argument("action", choices=[a.value for a in netnode.StoreAction])
    store.add_argument("bucket", nargs="?", default="", help="with bucket: its name")
    args = parser.parse_args(argv)
    nodes = getattr(args, "nodes", None)
    if nodes is not None and (not 1 <= nodes <= netnode.MAX_NODES or not args.real_node):
        parser.error(f"--nodes needs --real-node and a count from 1 to {netnode.MAX_NODES}")
    cluster = LocalCluster(args.name, real_node=True if getattr(args, "real_node", False) else None, nodes=nodes)
    try:
        if args.command == "up":
            already = cluster.running()
            took = cluster.up(args.timeout)
            state = "already running" if already else f"up in {took:.1f} s"
            print(f"cluster {args.name!r} {state}; kubeconfig: {cluster.paths.kubeconfig}", file=sys.stderr)
            print(f"logs: {cluster.paths.logs}", file=sys.stderr)
        elif args.command == "down":
            stopped = cluster.down(args.purge)
            print(f"stopped: {', '.join(stopped) or 'nothing was running'}"
                  + (f"; removed {cluster.paths.root}" if args.purge else ""), file=sys.stderr)
        elif args.command == "status":
            print(f"cluster {args.name!r}: data {cluster.paths.root}")
            print(f"binaries: {paths.binaries_dir()} ({'built' if build.is_built() else 'not built'})")
            if cluster.real_node:
                which = ", ".join(n.name for n in cluster.nodes) if cluster.nodes else cluster.node.name
                print(f"real node(s) {which}: binaries {paths.node_binaries_dir()} "
                      f"({'built' if nodebuild.is_built() else 'not built'})")
            for st in cluster.status():
                health = {True: "healthy", False: "UNHEALTHY", None: "-"}[st.healthy]
                state = f"running pid {st.pid}" if st.running else "stopped"
                print(f"  {st.name:<24} {state:<18} {health:<10} log: {st.log}")
            return 0 if all(st.running for st in cluster.status()) else 3
        elif args.command == "env":
            print("\n".join(cluster.env_lines()))
        elif args.command == "build":
            print(build.build())
        elif args.command == "node":
            print(cluster.fault(args.node_name, netnode.Fault(args.fault)), file=sys.stderr)
        elif args.command == "objectstore":
            action = netnode.StoreAction(args.action)
            if action is netnode.StoreAction.BUCKET and not args.bucket:
                parser.error("objectstore bucket needs the bucket's name")
            print(cluster.objectstore(action, args.bucket), file=sys.stderr)
        elif args.command == "images":
            for ref, archive in cluster.load_images(args.operator).items():
                print(f"{ref}\t{archive}")
    except (build.BuildError, ClusterError, NodeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0
