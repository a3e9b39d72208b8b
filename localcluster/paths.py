"""Where the control plane's binaries, data and logs live."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

KUBERNETES_VERSION = "1.34.4"
ETCD_VERSION = "3.6.16"
KWOK_VERSION = "0.8.0"
# The real worker node (``cluster up --real-node``).
CONTAINERD_VERSION = "2.1.5"
RUNC_VERSION = "1.3.3"
CNI_PLUGINS_VERSION = "1.8.0"
COREDNS_VERSION = "1.12.4"
LOCAL_PATH_PROVISIONER_VERSION = "0.0.30"
# The node's registry (CNCF Distribution): kept apart from the node's key so that adding it rebuilt nothing.
REGISTRY_VERSION = "3.1.2"
# The S3-compatible object store beside the node (versitygw, posix backend), kept apart for the same reason.
VERSITYGW_VERSION = "1.8.0"

GOMOD_DIR = Path(__file__).resolve().parent / "gomod"


def _xdg(var: str, default: str) -> Path:
    return Path(os.environ.get(var) or Path.home() / default)


def cache_root() -> Path:
    """Per-user cache; ``PLAYBOOK_OPERATOR_CACHE`` moves it (e.g. to a CI cache volume)."""
    override = os.environ.get("PLAYBOOK_OPERATOR_CACHE")
    return Path(override) if override else _xdg("XDG_CACHE_HOME", ".cache") / "playbook-operator"


def version_key() -> str:
    return f"k8s-{KUBERNETES_VERSION}_etcd-{ETCD_VERSION}_kwok-{KWOK_VERSION}"


def node_version_key() -> str:
    return (f"k8s-{KUBERNETES_VERSION}_containerd-{CONTAINERD_VERSION}_runc-{RUNC_VERSION}"
            f"_cni-{CNI_PLUGINS_VERSION}_coredns-{COREDNS_VERSION}_lpp-{LOCAL_PATH_PROVISIONER_VERSION}")


def node_binaries_dir() -> Path:
    """The real node's binaries, keyed like the control plane's."""
    return cache_root() / "node" / node_version_key()


def registry_binaries_dir() -> Path:
    return cache_root() / "node" / f"registry-{REGISTRY_VERSION}"


def versitygw_binaries_dir() -> Path:
    return cache_root() / "node" / f"versitygw-{VERSITYGW_VERSION}"


def binaries_dir() -> Path:
    """Keyed by every component's version, so a version bump builds afresh and the old set stays usable."""
    return cache_root() / "control-plane" / version_key()


@dataclass(frozen=True)
class ClusterPaths:
    """Everything one named local cluster keeps on disk."""

    root: Path

    @classmethod
    def for_name(cls, name: str) -> ClusterPaths:
        override = os.environ.get("PLAYBOOK_OPERATOR_CLUSTER_DIR")
        base = Path(override) if override else cache_root() / "clusters"
        return cls(base / name)

    @property
    def state_file(self) -> Path:
        return self.root / "cluster.json"

    @property
    def kubeconfig(self) -> Path:
        return self.root / "kubeconfig"

    @property
    def pki(self) -> Path:
        return self.root / "pki"

    @property
    def etcd_data(self) -> Path:
        return self.root / "etcd"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def pids(self) -> Path:
        return self.root / "pids"

    @property
    def lock(self) -> Path:
        return self.root / ".lock"
