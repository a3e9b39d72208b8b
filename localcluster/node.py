"""The real worker node of a local cluster: containerd + runc, kubelet, kube-proxy (iptables), CoreDNS,
Rancher's local-path provisioner and a CNI bridge, all plain processes on this machine.

Nothing a pod sends may leave the machine. The pod range lives on a bridge of this machine
(``cni0``), Services are kube-proxy's iptables rules, and before any pod starts a FORWARD rule drops
whatever the bridge would forward to another interface (and, named as such, to the outside one).
The default route is never touched. The API server and the kubelet listen on an address put on the
loopback interface (``NODE_IP``), which pods reach through the bridge and nothing outside can route to.
Image pulls are pointed at a closed local port: every image is built here and imported beforehand.

One real node per machine: it owns the bridge, port 10250 and the iptables chains.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from . import images, nodebuild
from .pki import NodeCerts

NODE_IP = "10.96.255.1"
POD_CIDR = "10.244.0.0/24"
BRIDGE = "cni0"
GATEWAY = "10.244.0.1"  # the bridge's address: pods' default gateway, and where CoreDNS answers
# The bridge's own MAC address, fixed (locally administered). A Linux bridge not given one takes the lowest MAC of
# its ports, so every pod that comes or goes may change the gateway's MAC under the other pods' ARP caches: their
# DNS queries and Service traffic then go nowhere until the stale entry fails and is resolved again. A replica
# reconnecting to a restarted primary took 30-70 s so (the e2e failover proofs' write stalls).
BRIDGE_MAC = "02:50:4f:00:00:01"
CLUSTER_DOMAIN = "cluster.local"
KUBELET_PORT = 10250
KUBELET_HEALTHZ_PORT = 10248
PROXY_HEALTHZ_PORT = 10256
PROXY_METRICS_PORT = 10249
COREDNS_HEALTH_PORT = 10254
# The node's registry (host loopback, one real node per machine): what containerd pulls docker.io images
# from, so that a pod which always pulls its image (no tag, or :latest) still gets it, from this machine.
REGISTRY_PORT = 5000
REGISTRY_NAMESPACE = "registry-seed"  # containerd namespace the registry's images are pushed from
# The node's S3-compatible object store (versitygw, posix backend): a host process, as users' object storage is
# outside their cluster, so that losing every server, volume and node leaves the backups. Pods reach it on the
# node's address as versitygw.objectstore.svc:7070. Its keys are local-only and fixed (the sample's Secret holds
# them, so that it applies as it is): the store listens on an address nothing outside this machine can route to.
OBJECTSTORE_PORT = 7070
OBJECTSTORE_NAMESPACE = "objectstore"
OBJECTSTORE_SERVICE = "versitygw"
OBJECTSTORE_REGION = "us-east-1"
OBJECTSTORE_ACCESS_KEY = "sampledb-local"
OBJECTSTORE_SECRET_KEY = "local-only-do-not-use-elsewhere-0000000000"
OBJECTSTORE_BUCKET = "sampledb"  # made at start; tests make their own
LOCAL_PATH_NAMESPACE = "local-path-storage"
STORAGE_CLASS = "local-path"
COMPONENTS = ("containerd", "registry", "versitygw", "coredns", "kubelet", "kube-proxy", "local-path-provisioner")
# Machine-wide: which cluster owns the one real node.
RUN_BASE = Path("/run/playbook-operator")  # tmpfs-like state: sockets, runtime state, namespace files
OWNER_FILE = Path("/run/playbook-operator/real-node.owner")
CHAIN_PREFIXES = ("KUBE-", "CNI-")


class NodeError(RuntimeError):
    pass


# The registry is on loopback: no proxy from the environment applies.
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def node_name(cluster: str) -> str:
    return f"{cluster}-node"


def _sh(*cmd: str, check: bool = True, input: str | None = None) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(list(cmd), capture_output=True, text=True, input=input)
    if check and proc.returncode != 0:
        raise NodeError(f"{shlex.join(cmd)} failed: {proc.stderr.strip() or proc.stdout.strip()}")
    return proc


def claim(owner_file: Path, bridge: str, cluster: str, what: str) -> None:
    """Records ``cluster`` as the one that owns ``bridge`` on this machine, unless another one's bridge is up."""
    owner_file.parent.mkdir(parents=True, exist_ok=True)
    try:
        owner = owner_file.read_text().strip()
    except FileNotFoundError:
        owner = ""
    if owner and owner != cluster and _sh("ip", "link", "show", bridge, check=False).returncode == 0:
        raise NodeError(f"cluster {owner!r} runs this machine's {what} (one at a time); stop it first:\n"
                        f"  playbook-operator cluster --name {owner} down")
    owner_file.write_text(cluster + "\n")


def outside_interfaces() -> list[str]:
    """The interfaces of this machine's default routes: where pod traffic must never go."""
    out = _sh("ip", "-j", "route", "show", "default", check=False).stdout or "[]"
    return sorted({r["dev"] for r in json.loads(out) if r.get("dev")})


def firewall_rules() -> list[list[str]]:
    """FORWARD rules (iptables argument lists, without -I/-C/-D) that keep pod traffic on this machine."""
    rules = [["FORWARD", "-i", BRIDGE, "!", "-o", BRIDGE, "-j", "DROP"]]
    rules += [["FORWARD", "-i", BRIDGE, "-o", dev, "-j", "DROP"] for dev in outside_interfaces()]
    return rules


def firewall_in_place() -> bool:
    return all(_sh("iptables", "-C", *rule, check=False).returncode == 0 for rule in firewall_rules())


@dataclass
class NodeLayout:
    """Where one cluster's node keeps its files."""

    cluster: str
    root: Path  # under the cluster's directory: removed by --purge

    @property
    def run(self) -> Path:
        # Short and in tmpfs: containerd's and runc's sockets and state, gone after a reboot as they should be.
        return RUN_BASE / self.cluster

    containerd_root = property(lambda self: self.root / "containerd")
    containerd_state = property(lambda self: self.run / "containerd")
    containerd_sock = property(lambda self: self.run / "containerd.sock")
    runc_root = property(lambda self: self.run / "runc")
    kubelet_root = property(lambda self: self.root / "kubelet")
    cni_conf = property(lambda self: self.root / "cni" / "net.d")
    cni_ipam = property(lambda self: self.run / "cni-ipam")
    volumes = property(lambda self: self.root / "local-path")
    registry = property(lambda self: self.root / "registry")
    objectstore = property(lambda self: self.root / "objectstore")
    config = property(lambda self: self.root / "config")
    state_file = property(lambda self: self.root / "node.json")


class RealNode:
    def __init__(self, cluster: str, cluster_root: Path, kubeconfig: Path, ca_crt: Path, pki) -> None:
        self.cluster = cluster
        self.name = node_name(cluster)
        self.layout = NodeLayout(cluster, cluster_root / "node")
        self.kubeconfig = kubeconfig
        self.ca_crt = ca_crt
        self.pki = pki
        self.certs = NodeCerts(pki.dir)
        # Where this node is reached, its pods' range and gateway, and the machine-wide services it uses.
        self.ip = NODE_IP
        self.pod_cidr = POD_CIDR
        self.cluster_cidr = POD_CIDR
        self.gateway = GATEWAY
        self.dns = GATEWAY
        self.registry = f"127.0.0.1:{REGISTRY_PORT}"
        self.objectstore = f"{NODE_IP}:{OBJECTSTORE_PORT}"  # pods reach it (the registry, on loopback, they cannot)
        self.healthz_address = "127.0.0.1"
        self.coredns_health = f"127.0.0.1:{COREDNS_HEALTH_PORT}"
        self.cgroup_root: str | None = None
        self.netns_under_state = False  # pods' network namespaces in /var/run/netns, as by default

    # ------------------------------------------------------------- host network
    def claim(self) -> None:
        claim(OWNER_FILE, BRIDGE, self.cluster, "real node")

    def setup_network(self) -> None:
        """Before the API server binds to NODE_IP and before any pod: addresses, bridge, firewall, sysctls."""
        self.claim()
        state = self._state()
        if _sh("ip", "-j", "addr", "show", "dev", "lo", check=False).stdout.find(f'"{NODE_IP}"') < 0:
            _sh("ip", "addr", "add", f"{NODE_IP}/32", "dev", "lo")
        if _sh("ip", "link", "show", BRIDGE, check=False).returncode != 0:
            _sh("ip", "link", "add", BRIDGE, "type", "bridge")
        _sh("ip", "link", "set", BRIDGE, "address", BRIDGE_MAC)
        if _sh("ip", "-j", "addr", "show", "dev", BRIDGE).stdout.find(f'"{GATEWAY}"') < 0:
            _sh("ip", "addr", "add", f"{GATEWAY}/24", "dev", BRIDGE)
        _sh("ip", "link", "set", BRIDGE, "up")
        for rule in reversed(firewall_rules()):
            if _sh("iptables", "-C", *rule, check=False).returncode != 0:
                _sh("iptables", "-I", *rule)
        if not firewall_in_place():
            raise NodeError("the FORWARD rules that keep pod traffic on this machine could not be added")
        # when the rules were (last) put in place: the e2e tier checks that no pod can predate them
        state["firewall_at"] = time.time()
        # Routing between the bridge and Service addresses needs forwarding; bridged traffic must pass
        # iptables for kube-proxy's rules. Both are put back as they were by `down`.
        sysctls = state.setdefault("sysctls", {})
        for key, value in (("net/ipv4/ip_forward", "1"), ("net/bridge/bridge-nf-call-iptables", "1")):
            f = Path("/proc/sys") / key
            if not f.exists():
                continue
            sysctls.setdefault(key, f.read_text().strip())
            f.write_text(value)
        self._save_state(state)

    def teardown_network(self) -> list[str]:
        done = []
        for ns in _sh("ip", "netns", "list", check=False).stdout.splitlines():
            name = ns.split()[0] if ns.split() else ""
            if name.startswith("cni-"):
                _sh("ip", "netns", "delete", name, check=False)
                done.append(f"netns {name}")
        if _sh("ip", "link", "show", BRIDGE, check=False).returncode == 0:
            _sh("ip", "link", "delete", BRIDGE, check=False)
            done.append(f"bridge {BRIDGE}")
        removed = remove_iptables_chains()
        if removed:
            done.append(f"{removed} iptables rules and chains")
        for rule in firewall_rules():
            while _sh("iptables", "-C", *rule, check=False).returncode == 0:
                _sh("iptables", "-D", *rule, check=False)
        if f'"{NODE_IP}"' in _sh("ip", "-j", "addr", "show", "dev", "lo", check=False).stdout:
            _sh("ip", "addr", "del", f"{NODE_IP}/32", "dev", "lo", check=False)
            done.append(f"address {NODE_IP}")
        state = self._state()
        for key, value in state.pop("sysctls", {}).items():
            try:
                (Path("/proc/sys") / key).write_text(value)
            except OSError:
                pass
        self._save_state(state)
        shutil.rmtree(self.layout.cni_ipam, ignore_errors=True)
        try:
            if OWNER_FILE.read_text().strip() == self.cluster:
                OWNER_FILE.unlink()
        except FileNotFoundError:
            pass
        return done

    def _state(self) -> dict:
        try:
            return json.loads(self.layout.state_file.read_text())
        except (FileNotFoundError, ValueError):
            return {}

    def _save_state(self, state: dict) -> None:
        self.layout.root.mkdir(parents=True, exist_ok=True)
        self.layout.state_file.write_text(json.dumps(state, indent=2) + "\n")

    # ------------------------------------------------------------- configuration
    def write_config(self, apiserver_url: str) -> None:
        self.write_node_config(apiserver_url)
        self.write_host_config()

    def write_node_config(self, apiserver_url: str) -> None:
        """What the node's own daemons (containerd, kubelet) read."""
        lay = self.layout
        for d in (lay.containerd_root, lay.containerd_state, lay.kubelet_root, lay.cni_conf, lay.volumes,
                  lay.config, lay.cni_ipam, lay.runc_root, lay.registry):
            d.mkdir(parents=True, exist_ok=True)
        if not self.certs.serving_crt.exists():
            self.pki.generate_node(self.name, self.ip, self.certs)
        cfg = lay.config
        # Every image is imported before use or served by the node's registry (docker.io's); a pull of
        # anything else must fail here, not go out.
        for host, server in (("_default", "http://127.0.0.1:9"), ("docker.io", f"http://{self.registry}")):
            (cfg / "registry" / host).mkdir(parents=True, exist_ok=True)
            (cfg / "registry" / host / "hosts.toml").write_text(
                f'server = "{server}"\n\n[host."{server}"]\n  capabilities = ["pull", "resolve"]\n')
        (cfg / "containerd.toml").write_text(f"""version = 3
root = "{lay.containerd_root}"
state = "{lay.containerd_state}"

[grpc]
  address = "{lay.containerd_sock}"

[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = "{images.PAUSE_REF}"
  [plugins."io.containerd.cri.v1.images".registry]
    config_path = "{cfg / 'registry'}"

[plugins."io.containerd.cri.v1.runtime"]
  # these machines refuse a negative oom_score_adj even to root
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = {str(self.netns_under_state).lower()}
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = ["{nodebuild.cni_bin_dir()}"]
    conf_dir = "{lay.cni_conf}"
  [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
      BinaryName = "{nodebuild.binary('runc')}"
      Root = "{lay.runc_root}"
      SystemdCgroup = false
""")
        (lay.cni_conf / "10-playbook-operator.conflist").write_text(json.dumps({
            "cniVersion": "1.0.0", "name": "playbook-operator",
            "plugins": [
                {"type": "bridge", "bridge": BRIDGE, "isGateway": True, "ipMasq": False, "hairpinMode": True,
                 "ipam": {"type": "host-local", "dataDir": str(lay.cni_ipam),
                          "ranges": [[{"subnet": self.pod_cidr, "gateway": self.gateway}]],
                          "routes": [{"dst": "0.0.0.0/0"}]}},
                {"type": "portmap", "capabilities": {"portMappings": True}},
            ]}, indent=2) + "\n")
        (cfg / "resolv.conf").write_text(f"nameserver {self.dns}\n")
        (cfg / "kubelet.kubeconfig").write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config",
            "clusters": [{"name": "local", "cluster": {"server": apiserver_url,
                                                       "certificate-authority": str(self.ca_crt)}}],
            "users": [{"name": "kubelet", "user": {"client-certificate": str(self.certs.client_crt),
                                                   "client-key": str(self.certs.client_key)}}],
            "contexts": [{"name": "local", "context": {"cluster": "local", "user": "kubelet"}}],
            "current-context": "local"}, indent=2) + "\n")
        (cfg / "kubelet.yaml").write_text(json.dumps({
            "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
            "address": self.ip, "port": KUBELET_PORT, "readOnlyPort": 0,
            "healthzBindAddress": self.healthz_address, "healthzPort": KUBELET_HEALTHZ_PORT,
            "containerRuntimeEndpoint": f"unix://{lay.containerd_sock}",
            # cgroup v1 only on these machines
            "cgroupDriver": "cgroupfs", "failCgroupV1": False, "failSwapOn": False,
            "clusterDNS": [self.dns], "clusterDomain": CLUSTER_DOMAIN, "resolvConf": str(cfg / "resolv.conf"),
            "podCIDR": self.pod_cidr, "maxPods": 110,
            **({"cgroupRoot": self.cgroup_root} if self.cgroup_root else {}),
            # Only holders of a certificate from the cluster's CA (the API server) may use the kubelet's API.
            "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": False},
                               "x509": {"clientCAFile": str(self.ca_crt)}},
            "authorization": {"mode": "AlwaysAllow"},
            "tlsCertFile": str(self.certs.serving_crt), "tlsPrivateKeyFile": str(self.certs.serving_key),
            # Images cannot be pulled again here: never collect them.
            "imageGCHighThresholdPercent": 100, "imageGCLowThresholdPercent": 99,
            "evictionHard": {"memory.available": "100Mi", "nodefs.available": "2%", "imagefs.available": "2%"},
            "serializeImagePulls": False,
            "syncFrequency": "10s", "fileCheckFrequency": "10s",
        }, indent=2) + "\n")

    def write_host_config(self) -> None:
        """What the machine-wide services (registry, CoreDNS) of the node read."""
        lay, cfg = self.layout, self.layout.config
        for d in (lay.config, lay.registry, lay.objectstore):
            d.mkdir(parents=True, exist_ok=True)
        (cfg / "registry.yml").write_text(json.dumps({
            "version": "0.1", "log": {"level": "warn"},
            "storage": {"filesystem": {"rootdirectory": str(lay.registry)},
                        "maintenance": {"uploadpurging": {"enabled": False}}},
            "http": {"addr": self.registry},
        }, indent=2) + "\n")
        # Only the cluster's zones are answered; every other name gets NXDOMAIN at once (nothing is
        # forwarded off the machine, and a SERVFAIL would make resolvers give up on their search list).
        (cfg / "Corefile").write_text(f"""{CLUSTER_DOMAIN}:53 in-addr.arpa:53 ip6.arpa:53 {{
    bind {self.dns}
    errors
    health {self.coredns_health}
    kubernetes {CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {{
        kubeconfig {self.kubeconfig}
        pods insecure
        ttl 5
    }}
    cache 5
    loadbalance
}}
.:53 {{
    bind {self.dns}
    template ANY ANY {{
        rcode NXDOMAIN
    }}
}}
""")

    def argv(self, component: str) -> list[str]:
        lay, cfg = self.layout, self.layout.config
        bin_ = str(nodebuild.binary(component))
        if component == "containerd":
            return [bin_, "--config", str(cfg / "containerd.toml")]
        if component == "kubelet":
            return [bin_, f"--config={cfg / 'kubelet.yaml'}", f"--kubeconfig={cfg / 'kubelet.kubeconfig'}",
                    f"--root-dir={lay.kubelet_root}", f"--cert-dir={lay.kubelet_root / 'pki'}",
                    f"--hostname-override={self.name}", f"--node-ip={self.ip}",
                    "--node-labels=playbook-operator.dev/real-node=true", "--v=1"]
        if component == "kube-proxy":
            return [bin_, f"--kubeconfig={self.kubeconfig}", f"--hostname-override={self.name}",
                    "--proxy-mode=iptables", f"--cluster-cidr={self.cluster_cidr}",
                    # a negative oom_score_adj is refused here; 0 leaves conntrack sysctls alone
                    "--oom-score-adj=0", "--conntrack-max-per-core=0",
                    f"--healthz-bind-address={self.healthz_address}:{PROXY_HEALTHZ_PORT}",
                    f"--metrics-bind-address={self.healthz_address}:{PROXY_METRICS_PORT}",
                    # NodePorts only on the node's own address, never on the outside interface
                    f"--nodeport-addresses={self.ip}/32"]
        if component == "coredns":
            return [bin_, "-conf", str(cfg / "Corefile")]
        if component == "registry":
            return [str(nodebuild.registry_binary()), "serve", str(cfg / "registry.yml")]
        if component == "versitygw":  # (its keys in env: a host process's command line is anyone's to read)
            return [str(nodebuild.versitygw_binary()), "--port", self.objectstore, "--health", "/health", "--quiet",
                    "posix", str(lay.objectstore)]
        if component == "local-path-provisioner":
            return [bin_, "start", f"--kubeconfig={self.kubeconfig}", f"--namespace={LOCAL_PATH_NAMESPACE}",
                    f"--helper-image={images.HELPER_REF}"]
        raise ValueError(component)

    def env(self, component: str) -> dict[str, str]:
        env = dict(os.environ)
        # containerd finds its shim on PATH
        env["PATH"] = f"{nodebuild.binary('containerd').parent}:{env.get('PATH', '/usr/sbin:/usr/bin:/sbin:/bin')}"
        for var in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
            env.pop(var, None)
        if component == "registry":
            env["OTEL_TRACES_EXPORTER"] = "none"  # its default sends traces to an OTLP collector
        if component == "versitygw":
            env.update(ROOT_ACCESS_KEY_ID=OBJECTSTORE_ACCESS_KEY, ROOT_SECRET_ACCESS_KEY=OBJECTSTORE_SECRET_KEY,
                       VGW_REGION=OBJECTSTORE_REGION)
        return env

    def create_bucket(self, bucket: str) -> None:
        """A bucket in the node's object store, owned by its keys (versitygw's own admin command); idempotent."""
        if bucket in self.buckets():
            return
        env = {**self.env("versitygw"), "ADMIN_ACCESS_KEY_ID": OBJECTSTORE_ACCESS_KEY,
               "ADMIN_SECRET_ACCESS_KEY": OBJECTSTORE_SECRET_KEY, "ADMIN_REGION": OBJECTSTORE_REGION,
               "ADMIN_ENDPOINT_URL": f"http://{self.objectstore}"}
        proc = subprocess.run([str(nodebuild.versitygw_binary()), "admin", "create-bucket", "--owner",
                               OBJECTSTORE_ACCESS_KEY, "--bucket", bucket], capture_output=True, text=True, env=env,
                              timeout=30)
        if proc.returncode != 0 and bucket not in self.buckets():
            raise NodeError(f"creating bucket {bucket!r} in the node's object store failed: "
                            f"{proc.stderr.strip() or proc.stdout.strip()}")

    def buckets(self) -> list[str]:
        """The object store's buckets: its posix backend keeps each as a directory (with an ACL)."""
        root = self.layout.objectstore
        return sorted(p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")) \
            if root.is_dir() else []

    def bootstrap_manifests(self) -> str:
        """What the node's add-ons need in the API: the provisioner's namespace, config and StorageClass."""
        cfg = {"nodePathMap": [{"node": "DEFAULT_PATH_FOR_NON_LISTED_NODES", "paths": [str(self.layout.volumes)]}]}
        helper_pod = {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "helper-pod"},
            "spec": {"containers": [{"name": "helper-pod", "image": images.HELPER_REF,
                                     "imagePullPolicy": "IfNotPresent"}]}}
        docs = [
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": LOCAL_PATH_NAMESPACE}},
            {"apiVersion": "v1", "kind": "ServiceAccount",
             "metadata": {"name": "local-path-provisioner-service-account", "namespace": LOCAL_PATH_NAMESPACE}},
            {"apiVersion": "v1", "kind": "ConfigMap",
             "metadata": {"name": "local-path-config", "namespace": LOCAL_PATH_NAMESPACE},
             "data": {"config.json": json.dumps(cfg),
                      # 0777: the server's own user (any uid) creates its data directory inside
                      "setup": '#!/bin/sh\nset -eu\nmkdir -m 0777 -p "$VOL_DIR"\n',
                      "teardown": '#!/bin/sh\nset -eu\nrm -rf "$VOL_DIR"\n',
                      "helperPod.yaml": json.dumps(helper_pod)}},
            {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
             "metadata": {"name": STORAGE_CLASS,
                          "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
             "provisioner": "rancher.io/local-path", "reclaimPolicy": "Delete",
             "volumeBindingMode": "WaitForFirstConsumer"},
            *self.objectstore_manifests(),
        ]
        return "\n---\n".join(json.dumps(d) for d in docs)

    def objectstore_manifests(self) -> list[dict]:
        """versitygw.objectstore.svc: a Service without a selector whose EndpointSlice is the host process."""
        addr, port = self.objectstore.rsplit(":", 1)
        ns = {"name": OBJECTSTORE_SERVICE, "namespace": OBJECTSTORE_NAMESPACE}
        return [
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": OBJECTSTORE_NAMESPACE}},
            {"apiVersion": "v1", "kind": "Service", "metadata": ns,
             "spec": {"ports": [{"name": "s3", "port": int(port), "targetPort": int(port), "protocol": "TCP"}]}},
            {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
             "metadata": {**ns, "labels": {"kubernetes.io/service-name": OBJECTSTORE_SERVICE,
                                           "endpointslice.kubernetes.io/managed-by": "playbook-operator.dev"}},
             "addressType": "IPv4", "endpoints": [{"addresses": [addr], "conditions": {"ready": True}}],
             "ports": [{"name": "s3", "port": int(port), "protocol": "TCP"}]},
        ]

    # ------------------------------------------------------------- images
    def ctr(self, *args: str, check: bool = True, timeout: float = 600,
            namespace: str = "k8s.io") -> subprocess.CompletedProcess[str]:
        proc = subprocess.run([str(nodebuild.binary("ctr")), "--address", str(self.layout.containerd_sock),
                               "--namespace", namespace, *args], capture_output=True, text=True, timeout=timeout)
        if check and proc.returncode != 0:
            raise NodeError(f"ctr {' '.join(args)} failed: {proc.stderr.strip()}")
        return proc

    def import_images(self, archives: dict[str, Path], log=print) -> None:
        """Imports each archive whose exact content containerd lacks (checked by the archive's digest)."""
        have = {}
        for line in self.ctr("images", "ls").stdout.splitlines()[1:]:
            parts = line.split()
            if len(parts) >= 3:
                have[parts[0]] = parts[2]
        for ref, archive in archives.items():
            digest = archive_digest(archive)
            if have.get(ref) == digest:
                continue
            t0 = time.monotonic()
            self.ctr("images", "import", "--snapshotter", "overlayfs", str(archive))
            log(f"imported {ref} in {time.monotonic() - t0:.0f} s")

    def registry_digest(self, ref: str) -> str | None:
        """The manifest digest the node's registry serves for a docker.io reference, or None."""
        repo, tag = ref.removeprefix("docker.io/").rsplit(":", 1)
        req = urllib.request.Request(f"http://{self.registry}/v2/{repo}/manifests/{tag}", method="HEAD",
                                     headers={"Accept": "application/vnd.oci.image.manifest.v1+json"})
        try:
            with _NO_PROXY.open(req, timeout=10) as resp:
                return resp.headers.get("Docker-Content-Digest")
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return None
            raise NodeError(f"the node's registry answered {exc.code} for {ref}") from exc

    def push_images(self, archives: dict[str, Path], log=print) -> None:
        """Puts each docker.io archive into the node's registry unless it serves that exact manifest: imported
        into a containerd namespace of its own (not the kubelet's, whose pulls must go to the registry), then
        pushed with ctr."""
        for ref, archive in archives.items():
            digest = archive_digest(archive)
            if self.registry_digest(ref) == digest:
                continue
            t0 = time.monotonic()
            self.ctr("images", "import", "--snapshotter", "overlayfs", str(archive), namespace=REGISTRY_NAMESPACE)
            remote = f"{self.registry}/{ref.removeprefix('docker.io/')}"
            self.ctr("images", "push", "--plain-http", remote, ref, namespace=REGISTRY_NAMESPACE)
            if self.registry_digest(ref) != digest:
                raise NodeError(f"pushed {ref} to the node's registry, which then served another digest")
            log(f"pushed {ref} to the node's registry in {time.monotonic() - t0:.0f} s")

    # ------------------------------------------------------------- stopping what the node left
    def kill_containers(self) -> int:
        """Kills every container of this node with the runc that made them (after the kubelet stopped)."""
        runc = str(nodebuild.binary("runc"))
        killed = 0
        root = self.layout.runc_root
        if not root.exists():
            return 0
        for ns_root in [p for p in root.iterdir() if p.is_dir()]:
            out = _sh(runc, "--root", str(ns_root), "list", "-q", check=False).stdout.split()
            for cid in out:
                _sh(runc, "--root", str(ns_root), "kill", cid, "KILL", check=False)
                killed += 1
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                states = _sh(runc, "--root", str(ns_root), "list", "-f", "json", check=False).stdout
                if all(c.get("status") != "running" for c in json.loads(states or "null") or []):
                    break
                time.sleep(0.2)
            for cid in out:
                _sh(runc, "--root", str(ns_root), "delete", "--force", cid, check=False)
        return killed

    def kill_shims(self) -> int:
        """containerd's shims outlive it; ours are the ones given our socket."""
        n = 0
        marker = str(self.layout.containerd_sock)
        for pid_dir in Path("/proc").iterdir():
            if not pid_dir.name.isdigit():
                continue
            try:
                cmdline = (pid_dir / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if cmdline and cmdline[0].endswith(b"containerd-shim-runc-v2") and marker.encode() in cmdline:
                try:
                    os.kill(int(pid_dir.name), signal.SIGKILL)
                    n += 1
                except ProcessLookupError:
                    pass
        return n

    def unmount_all(self) -> int:
        """Unmounts everything below the node's directories (volumes, rootfs, shm, netns), deepest first."""
        prefixes = (str(self.layout.root) + "/", str(self.layout.run) + "/", "/run/netns/cni-", "/var/run/netns/cni-")
        count = 0
        for _ in range(5):
            mounts = []
            with open("/proc/self/mountinfo") as fh:
                for line in fh:
                    point = line.split()[4].encode().decode("unicode_escape")
                    if point.startswith(prefixes):
                        mounts.append(point)
            if not mounts:
                break
            for point in sorted(set(mounts), key=len, reverse=True):
                if _sh("umount", point, check=False).returncode != 0:
                    _sh("umount", "-l", point, check=False)
                count += 1
        return count


def archive_digest(archive: Path) -> str:
    """The manifest digest an OCI archive's index names: what `ctr images ls` shows once imported."""
    import tarfile

    with tarfile.open(archive) as tar:
        member = tar.extractfile("index.json")
        if member is None:
            raise NodeError(f"{archive} has no index.json")
        return json.load(member)["manifests"][0]["digest"]


def remove_iptables_chains() -> int:
    """Removes every rule that jumps to, and every chain named, KUBE-* or CNI-* (kubelet's, kube-proxy's
    and the CNI plugins'), in every table of both families."""
    removed = 0
    for family in ("iptables", "ip6tables"):
        if not shutil.which(family):
            continue
        for table in ("filter", "nat", "mangle", "raw"):
            dump = _sh(f"{family}-save", "-t", table, check=False).stdout
            ours = [line.split()[0][1:] for line in dump.splitlines()
                    if line.startswith(":") and line[1:].startswith(CHAIN_PREFIXES)]
            for line in dump.splitlines():
                if not line.startswith("-A "):
                    continue
                args = shlex.split(line)
                chain = args[1]
                target = args[args.index("-j") + 1] if "-j" in args else ""
                if chain.startswith(CHAIN_PREFIXES):
                    continue  # goes with its chain
                if target.startswith(CHAIN_PREFIXES):
                    _sh(family, "-t", table, "-D", *args[1:], check=False)
                    removed += 1
            for chain in ours:
                _sh(family, "-t", table, "-F", chain, check=False)
            for chain in ours:
                if _sh(family, "-t", table, "-X", chain, check=False).returncode == 0:
                    removed += 1
    return removed


def leftover_iptables() -> list[str]:
    """Lines of iptables-save (both families) that a node would have added: empty after `down`."""
    lines = []
    for family in ("iptables", "ip6tables"):
        if shutil.which(family):
            dump = _sh(f"{family}-save", check=False).stdout
            lines += [f"{family}: {line}" for line in dump.splitlines()
                      if re.search(r"\b(KUBE|CNI)-", line) or f"-i {BRIDGE}" in line]
    return lines
