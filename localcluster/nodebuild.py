"""Builds the real worker node's binaries from the Go module proxy, once per version set.

kubelet and kube-proxy come from the control plane's wrapper module (they share its build cache);
containerd and runc carry replace/exclude directives that `go install` refuses, so they are built
from their own module tree as the main module; the CNI plugins, CoreDNS and the local-path
provisioner install as they are. Like the control plane, the result is renamed into the cache only
when complete. The node's registry (CNCF Distribution) is built the same way into a directory of its own
version.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from . import build, paths
from .build import BuildError, _locked, _log

CNI_PLUGINS = ("main/bridge", "main/loopback", "ipam/host-local", "meta/portmap")


@dataclass(frozen=True)
class NodeComponent:
    name: str
    binaries: tuple[str, ...]  # relative to the node's binaries directory
    make: Callable[[str, Path, dict[str, str]], None]  # (go, output dir, env)


def binary(name: str) -> Path:
    return paths.node_binaries_dir() / "bin" / name


def cni_bin_dir() -> Path:
    return paths.node_binaries_dir() / "cni"


def _run(cmd: list[str], cwd: Path, env: dict[str, str], what: str) -> None:
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise BuildError(f"{what} failed ({' '.join(cmd[:3])} ...):\n{proc.stderr[-4000:]}")


def _k8s(name: str) -> Callable[[str, Path, dict[str, str]], None]:
    def make(go: str, out: Path, env: dict[str, str]) -> None:
        env = {**env, "CGO_ENABLED": "0", "GOFLAGS": "-mod=readonly"}
        _run([go, "build", "-trimpath", "-ldflags", build.K8S_LDFLAGS, "-o", str(out / "bin" / name),
              f"k8s.io/kubernetes/cmd/{name}"], paths.GOMOD_DIR / "kubernetes", env, f"building {name}")
    return make


def _module_tree(go: str, module: str, version: str, env: dict[str, str], work: Path) -> Path:
    """A writable copy of a module's source, to build it as the main module (its own go.mod rules)."""
    proc = subprocess.run([go, "mod", "download", "-json", f"{module}@{version}"], cwd=work, env=env,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise BuildError(f"downloading {module}@{version} failed:\n{proc.stderr[-2000:]}")
    src = Path(json.loads(proc.stdout)["Dir"])
    tree = work / module.replace("/", "_")
    shutil.copytree(src, tree, symlinks=True)
    for dirpath, _dirnames, filenames in os.walk(tree):
        os.chmod(dirpath, 0o755)
        for f in filenames:
            p = Path(dirpath) / f
            if not p.is_symlink():
                p.chmod(p.stat().st_mode | stat.S_IWUSR)
    # Module zips carry no vendor/ contents worth trusting; -mod=mod resolves from go.sum instead.
    shutil.rmtree(tree / "vendor", ignore_errors=True)
    return tree


def _containerd(go: str, out: Path, env: dict[str, str]) -> None:
    env = {**env, "GOFLAGS": "-mod=mod"}
    env.pop("CGO_ENABLED", None)
    with tempfile.TemporaryDirectory(prefix="containerd-", dir=out.parent) as work:
        tree = _module_tree(go, "github.com/containerd/containerd/v2", f"v{paths.CONTAINERD_VERSION}", env, Path(work))
        for cmd in ("containerd", "containerd-shim-runc-v2", "ctr"):
            _run([go, "build", "-trimpath", "-tags", "no_btrfs", "-ldflags",
                  f"-s -w -X github.com/containerd/containerd/v2/version.Version=v{paths.CONTAINERD_VERSION}",
                  "-o", str(out / "bin" / cmd), f"./cmd/{cmd}"], tree, env, f"building {cmd}")


def _runc(go: str, out: Path, env: dict[str, str]) -> None:
    # Without the seccomp tag every pod fails ("seccomp: config provided but seccomp not supported"); it
    # links libseccomp through cgo.
    env = {**env, "GOFLAGS": "-mod=mod", "CGO_ENABLED": "1"}
    with tempfile.TemporaryDirectory(prefix="runc-", dir=out.parent) as work:
        tree = _module_tree(go, "github.com/opencontainers/runc", f"v{paths.RUNC_VERSION}", env, Path(work))
        # The replacement is a nested module that the zip does not carry.
        _run([go, "mod", "edit", "-dropreplace", "github.com/opencontainers/selinux"], tree, env, "editing runc's go.mod")
        _run([go, "build", "-trimpath", "-tags", "seccomp", "-ldflags",
              f"-s -w -X main.version={paths.RUNC_VERSION}", "-o", str(out / "bin" / "runc"), "."],
             tree, env, "building runc (needs libseccomp-dev and pkg-config)")


def _go_install(target: str, bindir: str) -> Callable[[str, Path, dict[str, str]], None]:
    def make(go: str, out: Path, env: dict[str, str]) -> None:
        env = {**env, "GOBIN": str(out / bindir), "CGO_ENABLED": "0"}
        env.pop("GOFLAGS", None)
        (out / bindir).mkdir(exist_ok=True)
        _run([go, "install", "-trimpath", "-ldflags", "-s -w", target], out, env, f"go install {target}")
    return make


def _cni(go: str, out: Path, env: dict[str, str]) -> None:
    for plugin in CNI_PLUGINS:
        _go_install(f"github.com/containernetworking/plugins/plugins/{plugin}@v{paths.CNI_PLUGINS_VERSION}", "cni")(
            go, out, env)


COMPONENTS: tuple[NodeComponent, ...] = (
    NodeComponent("kubelet", ("bin/kubelet",), _k8s("kubelet")),
    NodeComponent("kube-proxy", ("bin/kube-proxy",), _k8s("kube-proxy")),
    NodeComponent("runc", ("bin/runc",), _runc),
    NodeComponent("containerd", ("bin/containerd", "bin/containerd-shim-runc-v2", "bin/ctr"), _containerd),
    NodeComponent("cni plugins", tuple(f"cni/{p.split('/')[1]}" for p in CNI_PLUGINS), _cni),
    NodeComponent("coredns", ("bin/coredns",),
                  _go_install(f"github.com/coredns/coredns@v{paths.COREDNS_VERSION}", "bin")),
    NodeComponent("local-path-provisioner", ("bin/local-path-provisioner",),
                  _go_install(f"github.com/rancher/local-path-provisioner@v{paths.LOCAL_PATH_PROVISIONER_VERSION}",
                              "bin")),
)


def _go() -> tuple[str, dict[str, str]]:
    """The go command, and its environment for these builds (a newer toolchain fetched when a module needs it)."""
    env = dict(os.environ)
    env.setdefault("GOTOOLCHAIN", "auto")
    return build.find_go(), env


def is_built() -> bool:
    root = paths.node_binaries_dir()
    return (root / "COMPLETE").exists() and all((root / b).exists() for c in COMPONENTS for b in c.binaries)


def build_node(force: bool = False) -> Path:
    """Builds every node component the cache lacks; returns the node's binaries directory."""
    root = paths.node_binaries_dir()
    with _locked(paths.cache_root() / "node" / ".build.lock"):
        if is_built() and not force:
            return root
        go, env = _go()
        started = time.monotonic()
        _log(f"building the real node into {root} (first time only; about 10 minutes on 2 cores)")
        with build.staged(root, paths.node_version_key()) as tmp:
            (tmp / "bin").mkdir()
            for i, comp in enumerate(COMPONENTS, 1):
                t0 = time.monotonic()
                _log(f"[node {i}/{len(COMPONENTS)}] {comp.name} ...")
                comp.make(go, tmp, env)
                missing = [b for b in comp.binaries if not (tmp / b).exists()]
                if missing:
                    raise BuildError(f"building {comp.name} left no {', '.join(missing)}")
                _log(f"[node {i}/{len(COMPONENTS)}] {comp.name} built in {time.monotonic() - t0:.0f} s")
        _log(f"real node built in {time.monotonic() - started:.0f} s")
        return root


def _build_host_tool(name: str, version: str, module: str, root: Path, minutes: int, force: bool) -> Path:
    """A service the node's host runs (go install of `module`), built once per version into root/bin."""
    binary = root / "bin" / module.rsplit("/", 1)[-1].split("@")[0]
    with _locked(paths.cache_root() / "node" / ".build.lock"):
        if (root / "COMPLETE").exists() and binary.exists() and not force:
            return binary
        go, env = _go()
        started = time.monotonic()
        _log(f"building the node's {name} ({module}) into {root} (about {minutes} minutes)")
        with build.staged(root, version) as tmp:
            _go_install(module, "bin")(go, tmp, env)
        _log(f"{name} built in {time.monotonic() - started:.0f} s")
        return binary


def registry_binary() -> Path:
    return paths.registry_binaries_dir() / "bin" / "registry"


def build_registry(force: bool = False) -> Path:
    """The node's registry (distribution's cmd/registry), built once per version; returns its binary."""
    return _build_host_tool("registry", paths.REGISTRY_VERSION,
                            f"github.com/distribution/distribution/v3/cmd/registry@v{paths.REGISTRY_VERSION}",
                            paths.registry_binaries_dir(), 2, force)


def versitygw_binary() -> Path:
    return paths.versitygw_binaries_dir() / "bin" / "versitygw"


def build_versitygw(force: bool = False) -> Path:
    """The node's object store (versitygw's cmd/versitygw), built once per version; returns its binary."""
    return _build_host_tool("object store", paths.VERSITYGW_VERSION,
                            f"github.com/versity/versitygw/cmd/versitygw@v{paths.VERSITYGW_VERSION}",
                            paths.versitygw_binaries_dir(), 4, force)
