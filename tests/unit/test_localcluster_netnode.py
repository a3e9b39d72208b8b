"""Several real nodes' bookkeeping, without starting anything: each node's addresses, files and processes are
its own, the single node's configuration is unchanged, and the commands refuse what they cannot do."""

from __future__ import annotations

import json

import pytest

from localcluster import cluster, netnode, node
from localcluster.pki import Pki


@pytest.fixture(autouse=True)
def _run_base(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.setattr(node, "RUN_BASE", tmp_path / "run")  # never the machine's /run


@pytest.fixture
def pki(tmp_path) -> Pki:
    p = Pki(tmp_path / "pki")
    p.generate()
    return p


def _nodes(tmp_path, pki: Pki, count: int = 3) -> list[netnode.NetNode]:
    return [netnode.NetNode("t", i, tmp_path, tmp_path / "kubeconfig", pki.ca_crt, pki) for i in range(1, count + 1)]


def test_each_node_has_its_own_address_pods_cgroup_runtime_and_namespace(tmp_path, pki: Pki) -> None:
    nodes = _nodes(tmp_path, pki)
    for n in nodes:
        n.write_node_config("https://10.97.0.1:6443")
    kubelets = [json.loads((n.layout.config / "kubelet.yaml").read_text()) for n in nodes]
    assert [k["address"] for k in kubelets] == ["10.97.0.11", "10.97.0.12", "10.97.0.13"]
    assert [k["podCIDR"] for k in kubelets] == ["10.244.1.0/24", "10.244.2.0/24", "10.244.3.0/24"]
    assert [k["cgroupRoot"] for k in kubelets] == ["/po-t-n1", "/po-t-n2", "/po-t-n3"]
    assert {k["clusterDNS"][0] for k in kubelets} == {netnode.LINK_GATEWAY}
    assert len({k["containerRuntimeEndpoint"] for k in kubelets}) == 3
    assert len({n.net_ns for n in nodes}) == 3 and len({str(n.mount_ns) for n in nodes}) == 3
    for n in nodes:
        conf = json.loads((n.layout.cni_conf / "10-playbook-operator.conflist").read_text())
        assert conf["plugins"][0]["ipam"]["ranges"] == [[{"subnet": n.pod_cidr, "gateway": n.gateway}]]
        toml = (n.layout.config / "containerd.toml").read_text()
        assert "netns_mounts_under_state_dir = true" in toml
        assert f'http://{netnode.LINK_GATEWAY}:{node.REGISTRY_PORT}' in (
            n.layout.config / "registry" / "docker.io" / "hosts.toml").read_text()
        # the kubelet's certificate names the node it serves
        assert n.certs.serving_crt.exists() and n.certs.dir != pki.dir


def test_the_single_node_keeps_its_host_paths_and_addresses(tmp_path, pki: Pki) -> None:
    one = node.RealNode("t", tmp_path, tmp_path / "kubeconfig", pki.ca_crt, pki)
    one.write_config("https://10.96.255.1:6443")
    kubelet = json.loads((one.layout.config / "kubelet.yaml").read_text())
    assert kubelet["address"] == node.NODE_IP and kubelet["podCIDR"] == node.POD_CIDR
    assert "cgroupRoot" not in kubelet and kubelet["healthzBindAddress"] == "127.0.0.1"
    assert "netns_mounts_under_state_dir = false" in (one.layout.config / "containerd.toml").read_text()
    assert f"bind {node.GATEWAY}" in (one.layout.config / "Corefile").read_text()


def test_a_node_s_daemons_run_inside_its_namespaces(tmp_path, pki: Pki) -> None:
    n = _nodes(tmp_path, pki, 2)[1]
    argv = n.wrap(n.argv("kubelet"))
    assert argv[:2] == ["sh", "-ec"] and n.net_ns.parent == n.mount_ns.parent == tmp_path / "run" / "nsfs"
    script = argv[2]
    assert "/po-t-n2/system/cgroup.procs" in script  # joins the node's cgroup first
    assert f"exec nsenter --net={n.net_ns} --mount={n.mount_ns} -- " in script
    assert "--node-ip=10.97.0.12" in script and "--hostname-override=t-node2" in script


def test_each_node_s_volumes_live_in_its_own_directory(tmp_path, pki: Pki) -> None:
    nodes = _nodes(tmp_path, pki)
    shared = node.RealNode("t", tmp_path, tmp_path / "kubeconfig", pki.ca_crt, pki)
    docs = [json.loads(d) for d in netnode.bootstrap_manifests(shared, nodes).split("\n---\n")]
    cm = next(d for d in docs if d["kind"] == "ConfigMap")
    assert json.loads(cm["data"]["config.json"])["nodePathMap"] == [
        {"node": n.name, "paths": [str(n.layout.volumes)]} for n in nodes]


def test_the_host_drops_whatever_the_nodes_link_would_forward_elsewhere(monkeypatch: pytest.MonkeyPatch,
                                                                         tmp_path) -> None:
    monkeypatch.setattr(netnode, "outside_interfaces", lambda: ["eth0"])
    rules = netnode.HostLink("t", tmp_path).firewall_rules()
    assert ["FORWARD", "-i", "po0", "!", "-o", "po0", "-j", "DROP"] in rules
    assert ["FORWARD", "-i", "po0", "-o", "eth0", "-j", "DROP"] in rules


def test_the_api_server_certificate_names_the_nodes_link(pki: Pki) -> None:
    assert pki.serves(netnode.LINK_GATEWAY) and pki.serves(node.NODE_IP)


def test_nodes_needs_a_real_node_and_faults_need_a_known_node(monkeypatch: pytest.MonkeyPatch, tmp_path,
                                                              capsys) -> None:
    monkeypatch.setenv("PLAYBOOK_OPERATOR_CACHE", str(tmp_path))
    with pytest.raises(SystemExit):
        cluster.main(["--name", "t", "up", "--nodes", "3"])
    assert "--nodes needs --real-node" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cluster.main(["--name", "t", "node", "t-node1", "reboot"])
    assert cluster.main(["--name", "t", "node", "t-node1", "poweroff"]) == 1
    assert "has no node 't-node1'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cluster.main(["--name", "t", "up", "--real-node", "--nodes", "10"])
    assert "from 1 to 9" in capsys.readouterr().err


def test_a_cluster_of_several_nodes_has_services_apart_from_the_one_node_s(monkeypatch: pytest.MonkeyPatch,
                                                                           tmp_path) -> None:
    monkeypatch.setenv("PLAYBOOK_OPERATOR_CACHE", str(tmp_path))
    several = cluster.LocalCluster("s", real_node=True, nodes=3)
    one = cluster.LocalCluster("o", real_node=True)
    assert several.service_cidr != one.service_cidr
    assert several.host == netnode.LINK_GATEWAY and one.host == node.NODE_IP
    assert [n.name for n in several.nodes] == ["s-node1", "s-node2", "s-node3"] and one.nodes == []
    assert "n2/kubelet" in several.components and "kubelet" in one.components


def test_the_object_store_is_reached_by_pods_on_the_host_and_its_keys_stay_off_its_command_line(
        monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.setenv("PLAYBOOK_OPERATOR_CACHE", str(tmp_path))
    several = cluster.LocalCluster("s", real_node=True, nodes=3)
    one = cluster.LocalCluster("o", real_node=True)
    assert one.node.objectstore == f"{node.NODE_IP}:{node.OBJECTSTORE_PORT}"
    assert several.node.objectstore == f"{netnode.LINK_GATEWAY}:{node.OBJECTSTORE_PORT}"
    assert "versitygw" in one.components and "versitygw" in several.components
    for c in (one, several):
        argv = c.node.argv("versitygw")
        assert argv[argv.index("--port") + 1] == c.node.objectstore
        assert argv[-1] == str(c.node.layout.objectstore) and argv[-2] == "posix"
        assert node.OBJECTSTORE_SECRET_KEY not in " ".join(argv)
        env = c.node.env("versitygw")
        assert env["ROOT_SECRET_ACCESS_KEY"] == node.OBJECTSTORE_SECRET_KEY
        assert env["ROOT_ACCESS_KEY_ID"] == node.OBJECTSTORE_ACCESS_KEY
        # versitygw.objectstore.svc: a Service whose only endpoint is the host process
        docs = {d["kind"]: d for d in c.node.objectstore_manifests()}
        assert "selector" not in docs["Service"]["spec"]
        assert docs["EndpointSlice"]["endpoints"][0]["addresses"] == [c.node.objectstore.split(":")[0]]
        assert docs["EndpointSlice"]["metadata"]["labels"]["kubernetes.io/service-name"] == node.OBJECTSTORE_SERVICE
    manifests = [json.loads(d) for d in netnode.bootstrap_manifests(several.node, several.nodes).split("\n---\n")]
    assert any(d["kind"] == "EndpointSlice" and d["endpoints"][0]["addresses"] == [netnode.LINK_GATEWAY]
               for d in manifests)
