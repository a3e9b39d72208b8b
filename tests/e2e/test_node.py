"""The real node of the local cluster: pods run real containers, reach DNS and the API server, get volumes,
and nothing they send can leave the machine."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from localcluster import node
from localcluster.cluster import LocalCluster
from tests.kube import Kube, wait_for
from tests.realnode import NODE_LANE, POSTGRES_IMAGE, simple_pod, wait_pod_ready

pytestmark = NODE_LANE


def _started_at(pid: int) -> float:
    """A process's start time, in seconds since the epoch."""
    ticks = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    btime = next(int(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines()
                 if line.startswith("btime "))
    return btime + ticks / os.sysconf("SC_CLK_TCK")


def _wait_done(real: Kube, namespace: str, name: str, timeout: float = 120) -> str:
    phase = wait_for(f"pod {name} to finish", lambda: (
        p := real.core.read_namespaced_pod(name, namespace).status.phase) in ("Succeeded", "Failed") and p,
        timeout=timeout, interval=0.5)
    return phase


def test_firewall_drops_pod_traffic_to_the_outside_from_before_the_first_pod(local: LocalCluster) -> None:
    outside = node.outside_interfaces()
    assert outside, "this machine has no default route: nothing to guard"
    for dev in outside:
        rule = ["FORWARD", "-i", node.BRIDGE, "-o", dev, "-j", "DROP"]
        assert subprocess.run(["iptables", "-C", *rule]).returncode == 0, f"missing: iptables -A {' '.join(rule)}"
    assert node.firewall_in_place()
    # The kubelet starts every pod; it was started after the rules were in place.
    firewall_at = local.node._state()["firewall_at"]
    kubelet = local.pid("kubelet")
    assert kubelet is not None
    assert firewall_at <= _started_at(kubelet)
    # and the default route is the machine's own, untouched
    routes = subprocess.run(["ip", "route", "show", "default"], capture_output=True, text=True).stdout
    assert node.BRIDGE not in routes


def test_a_pod_resolves_cluster_dns_and_reaches_the_api_server(real: Kube, real_namespace: str) -> None:
    real.kubectl("-n", real_namespace, "create", "service", "clusterip", "named", "--tcp=80:80")
    script = ("set -e; getent hosts kubernetes.default.svc.cluster.local; "
              f"getent hosts named.{real_namespace}.svc.cluster.local; getent hosts named; "
              # the API server through the kubernetes Service, with the pod's own ServiceAccount token
              "exec 3<>/dev/tcp/kubernetes.default.svc/443; echo api-reachable; "
              "test -s /var/run/secrets/kubernetes.io/serviceaccount/token && echo token-mounted")
    real.core.create_namespaced_pod(real_namespace, simple_pod("dns", ["bash", "-c", script]))
    assert _wait_done(real, real_namespace, "dns") == "Succeeded", real.kubectl(
        "-n", real_namespace, "logs", "dns", check=False).stdout
    out = real.kubectl("-n", real_namespace, "logs", "dns").stdout
    svc_ip = real.core.read_namespaced_service("named", real_namespace).spec.cluster_ip
    lines = out.splitlines()
    assert lines[0].split()[0] == "10.0.0.1"
    assert lines[1].split()[0] == svc_ip and lines[2].split()[0] == svc_ip
    assert "api-reachable" in lines and "token-mounted" in lines


def test_the_gateway_keeps_its_mac_while_pods_come_and_go(real: Kube, real_namespace: str) -> None:
    # A bridge left to itself takes the lowest MAC of its ports: pods coming and going would change the gateway's
    # (where DNS answers) under the others' ARP caches, and their traffic would stall until the entry failed.
    mac = Path(f"/sys/class/net/{node.BRIDGE}/address")
    assert mac.read_text().strip() == node.BRIDGE_MAC
    real.core.create_namespaced_pod(real_namespace, simple_pod("steady", ["sleep", "600"]))
    wait_pod_ready(real, real_namespace, "steady")
    for name in ("passing-1", "passing-2"):
        real.core.create_namespaced_pod(real_namespace, simple_pod(name, ["sleep", "600"]))
        wait_pod_ready(real, real_namespace, name)
        real.core.delete_namespaced_pod(name, real_namespace)
        wait_for(f"{name} to go", lambda n=name: not [p for p in real.core.list_namespaced_pod(real_namespace).items
                                                      if p.metadata.name == n], timeout=60, interval=0.5)
        assert mac.read_text().strip() == node.BRIDGE_MAC
    # and what the pod that stayed knows of its gateway is still right
    real.kubectl("-n", real_namespace, "exec", "steady", "--", "getent", "hosts", "kubernetes.default.svc.cluster.local")
    arp = real.kubectl("-n", real_namespace, "exec", "steady", "--", "cat", "/proc/net/arp").stdout
    gateway = next(line.split() for line in arp.splitlines() if line.split()[:1] == [node.GATEWAY])
    assert gateway[3] == node.BRIDGE_MAC and gateway[2] == "0x2", arp  # complete, with the bridge's fixed MAC


def test_logs_exec_and_port_forward_reach_a_real_server(real: Kube, real_namespace: str) -> None:
    image = POSTGRES_IMAGE
    server = ("initdb -D /tmp/pgdata --auth=trust >/dev/null && echo initialised && "
              "exec postgres -D /tmp/pgdata -c listen_addresses='*' -k /tmp")
    pod = simple_pod("pg", ["bash", "-c", server], image=image,
               securityContext={"runAsUser": 999, "runAsGroup": 999, "runAsNonRoot": True})
    pod["spec"]["containers"][0]["readinessProbe"] = {
        "exec": {"command": ["pg_isready", "-h", "127.0.0.1"]}, "periodSeconds": 1}
    real.core.create_namespaced_pod(real_namespace, pod)
    wait_pod_ready(real, real_namespace, "pg")
    assert "initialised" in real.kubectl("-n", real_namespace, "logs", "pg").stdout
    who = real.kubectl("-n", real_namespace, "exec", "pg", "--", "id", "-u").stdout.strip()
    assert who == "999"
    fwd = subprocess.Popen([real.kubectl_path, f"--kubeconfig={real.kubeconfig}", "-n", real_namespace,
                            "port-forward", "pod/pg", ":5432"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True)
    try:
        line = fwd.stdout.readline()  # "Forwarding from 127.0.0.1:NNNNN -> 5432"
        port = int(line.split("->")[0].rsplit(":", 1)[1])
        out = subprocess.run(["psql", "-X", "-At", "-h", "127.0.0.1", "-p", str(port), "-U", "postgres",
                              "-c", "select 40 + 2"], capture_output=True, text=True, timeout=30)
        assert out.stdout.strip() == "42", out.stderr
    finally:
        fwd.terminate()
        fwd.wait(10)


def test_an_image_always_pulled_comes_from_the_nodes_registry_and_nothing_else_is_pulled(
        real: Kube, real_namespace: str) -> None:
    pulled = simple_pod("pulled", ["sh", "-c", "echo pulled-from-the-node"], image="busybox")
    pulled["spec"]["containers"][0]["imagePullPolicy"] = "Always"
    real.core.create_namespaced_pod(real_namespace, pulled)
    pod = real.core.read_namespaced_pod("pulled", real_namespace)
    assert pod.spec.containers[0].image_pull_policy == "Always"
    assert _wait_done(real, real_namespace, "pulled") == "Succeeded"
    assert real.kubectl("-n", real_namespace, "logs", "pulled").stdout.strip() == "pulled-from-the-node"
    # an image neither imported nor in the node's registry: the registry answers that it has no such manifest
    # (NotFound: an answer, where an unreachable registry would give a connection error) ...
    real.core.create_namespaced_pod(real_namespace, simple_pod("absent", ["true"], image="not-in-the-registry:1"))
    assert "code = NotFound" in _pull_failure(real, real_namespace, "absent")
    # ... and one of any other registry is sent to a closed local port, never out
    real.core.create_namespaced_pod(real_namespace, simple_pod("elsewhere", ["true"], image="quay.io/nobody/none:1"))
    assert "127.0.0.1:9" in _pull_failure(real, real_namespace, "elsewhere")


def _pull_failure(real: Kube, ns: str, pod: str) -> str:
    waiting = wait_for(f"{pod}'s pull to fail", lambda: (
        (s := real.core.read_namespaced_pod(pod, ns).status.container_statuses)
        # ErrImagePull (each retry after a back-off) carries the pull's own error
        and s[0].state.waiting and s[0].state.waiting.reason == "ErrImagePull" and s[0].state.waiting.message
        and s[0].state.waiting), timeout=90, interval=0.5)
    return waiting.message


def test_a_claim_gets_a_volume_that_the_server_user_can_write(real: Kube, real_namespace: str,
                                                             local: LocalCluster) -> None:
    real.core.create_namespaced_persistent_volume_claim(real_namespace, {
        "apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "data"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "64Mi"}}}})
    pod = simple_pod("writer", ["bash", "-c", "mkdir /data/pgdata && chmod 700 /data/pgdata && "
                          "echo rows > /data/pgdata/file && stat -c '%u %a' /data/pgdata"],
               securityContext={"runAsUser": 999, "runAsGroup": 999, "runAsNonRoot": True})
    pod["spec"]["containers"][0]["volumeMounts"] = [{"name": "data", "mountPath": "/data"}]
    pod["spec"]["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]
    real.core.create_namespaced_pod(real_namespace, pod)
    assert _wait_done(real, real_namespace, "writer") == "Succeeded", real.kubectl(
        "-n", real_namespace, "logs", "writer", check=False).stdout
    assert real.kubectl("-n", real_namespace, "logs", "writer").stdout.split() == ["999", "700"]
    pvc = real.core.read_namespaced_persistent_volume_claim("data", real_namespace)
    assert pvc.spec.storage_class_name == node.STORAGE_CLASS and pvc.status.phase == "Bound"
    pv = real.core.read_persistent_volume(pvc.spec.volume_name)
    path = Path(pv.spec.host_path.path if pv.spec.host_path else pv.spec.local.path)
    assert path.is_relative_to(local.node.layout.volumes)
    assert (path / "pgdata" / "file").read_text() == "rows\n"
    # Deleting the claim removes the volume and its directory (the provisioner's teardown helper pod).
    real.core.delete_namespaced_pod("writer", real_namespace, grace_period_seconds=0)
    wait_for("the writer pod to go", lambda: not real.core.list_namespaced_pod(real_namespace).items, timeout=60)
    real.core.delete_namespaced_persistent_volume_claim("data", real_namespace)
    wait_for("the volume's directory to be removed", lambda: not path.exists(), timeout=90)


def test_cluster_status_lists_the_node_components_healthy(local: LocalCluster) -> None:
    out = subprocess.run(["playbook-operator", "cluster", "--name", "e2e", "status"], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    for component in ("containerd", "registry", "kubelet", "kube-proxy", "coredns"):
        line = next(line for line in out.stdout.splitlines() if line.split()[:1] == [component])
        assert "running pid" in line and " healthy " in line and f"{component}.log" in line
    line = next(line for line in out.stdout.splitlines() if line.split()[:1] == ["local-path-provisioner"])
    assert "running pid" in line
