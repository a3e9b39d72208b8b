"""The real node's bookkeeping, without starting anything: cache keys, firewall rules, iptables clean-up."""

from __future__ import annotations

import subprocess

import pytest

from localcluster import node, nodebuild, paths


def test_node_cache_is_keyed_by_every_version(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.setenv("PLAYBOOK_OPERATOR_CACHE", str(tmp_path))
    root = paths.node_binaries_dir()
    assert root.parent == tmp_path / "node"
    for version in (paths.KUBERNETES_VERSION, paths.CONTAINERD_VERSION, paths.RUNC_VERSION,
                    paths.CNI_PLUGINS_VERSION, paths.COREDNS_VERSION, paths.LOCAL_PATH_PROVISIONER_VERSION):
        assert version in root.name
    assert not nodebuild.is_built()


def test_the_kubernetes_wrapper_builds_kubelet_and_kube_proxy() -> None:
    tools = (paths.GOMOD_DIR / "kubernetes" / "tools.go").read_text()
    assert '"k8s.io/kubernetes/cmd/kubelet"' in tools and '"k8s.io/kubernetes/cmd/kube-proxy"' in tools


def test_firewall_drops_everything_the_bridge_would_forward_elsewhere(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(node, "outside_interfaces", lambda: ["eth0"])
    rules = node.firewall_rules()
    assert ["FORWARD", "-i", "cni0", "!", "-o", "cni0", "-j", "DROP"] in rules
    assert ["FORWARD", "-i", "cni0", "-o", "eth0", "-j", "DROP"] in rules


SAVE = """*nat
:PREROUTING ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
:KUBE-SERVICES - [0:0]
:CNI-HOSTPORT-DNAT - [0:0]
:DOCKERISH - [0:0]
-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A OUTPUT -m addrtype --dst-type LOCAL -j CNI-HOSTPORT-DNAT
-A OUTPUT -j DOCKERISH
-A KUBE-SERVICES -j RETURN
COMMIT
"""


def test_iptables_clean_up_removes_only_kube_and_cni_chains_and_the_jumps_to_them(
        monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[str, ...]] = []

    def fake(*cmd: str, check: bool = True, input: str | None = None) -> subprocess.CompletedProcess[str]:
        calls.append(cmd)
        out = SAVE if cmd[0] == "iptables-save" and cmd[2] == "nat" else ""
        return subprocess.CompletedProcess(list(cmd), 0, out, "")

    monkeypatch.setattr(node, "_sh", fake)
    monkeypatch.setattr(node.shutil, "which", lambda name: name == "iptables")
    node.remove_iptables_chains()
    changes = [c for c in calls if c[0] == "iptables"]
    assert ("iptables", "-t", "nat", "-D", "PREROUTING", "-m", "comment", "--comment", "kubernetes service portals",
            "-j", "KUBE-SERVICES") in changes
    assert ("iptables", "-t", "nat", "-D", "OUTPUT", "-m", "addrtype", "--dst-type", "LOCAL", "-j",
            "CNI-HOSTPORT-DNAT") in changes
    assert ("iptables", "-t", "nat", "-X", "KUBE-SERVICES") in changes
    assert ("iptables", "-t", "nat", "-X", "CNI-HOSTPORT-DNAT") in changes
    assert not [c for c in changes if "DOCKERISH" in c]
