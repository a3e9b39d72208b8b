"""Builds the control-plane binaries from the Go module proxy, once per version set.

Components are built one after another: parallel Go builds of Kubernetes thrash a 2-core machine.
The result goes to a temporary directory and is renamed into the cache only when complete, so an
interrupted build never leaves a half-filled cache behind.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from . import paths

K8S_LDFLAGS = " ".join(
    [
        "-s -w",
        f"-X k8s.io/component-base/version.gitVersion=v{paths.KUBERNETES_VERSION}",
        "-X k8s.io/component-base/version.gitMajor=1",
        "-X k8s.io/component-base/version.gitMinor=" + paths.KUBERNETES_VERSION.split(".")[1],
        f"-X k8s.io/client-go/pkg/version.gitVersion=v{paths.KUBERNETES_VERSION}",
    ]
)


@dataclass(frozen=True)
class Component:
    name: str
    module_dir: str  # under paths.GOMOD_DIR
    package: str
    ldflags: str = "-s -w"


COMPONENTS: tuple[Component, ...] = (
    Component("kube-apiserver", "kubernetes", "k8s.io/kubernetes/cmd/kube-apiserver", K8S_LDFLAGS),
    Component(
        "kube-controller-manager", "kubernetes", "k8s.io/kubernetes/cmd/kube-controller-manager", K8S_LDFLAGS
    ),
    Component("kube-scheduler", "kubernetes", "k8s.io/kubernetes/cmd/kube-scheduler", K8S_LDFLAGS),
    Component("kubectl", "kubernetes", "k8s.io/kubernetes/cmd/kubectl", K8S_LDFLAGS),
    Component("etcd", "etcd", "go.etcd.io/etcd/server/v3"),
    Component("kwok", "kwok", "sigs.k8s.io/kwok/cmd/kwok"),
)

# kwok v0.8 does nothing without stages. These come from the kwok module itself and are copied into
# the cache next to the binaries so that a cleaned Go module cache does not break a cached cluster.
KWOK_STAGE_FILES: tuple[str, ...] = (
    "node/fast/node-initialize.yaml",
    "node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
    "node/chaos/node-not-ready.yaml",
    "pod/general/pod-create.yaml",
    "pod/general/pod-init-container-running.yaml",
    "pod/general/pod-init-container-completed.yaml",
    "pod/general/pod-ready.yaml",
    "pod/general/pod-complete.yaml",
    "pod/general/pod-delete.yaml",
    "pod/chaos/pod-container-running-failed.yaml",
    "pod/chaos/pod-init-container-running-failed.yaml",
    "volume/fast/pv-bind.yaml",
    "volume/fast/pv-delete.yaml",
    "volume/fast/pvc-provision.yaml",
    "volume/fast/pvc-delete.yaml",
)
KWOK_STORAGE_CLASS = "volume/fast/storage-class.yaml"


class BuildError(RuntimeError):
    pass


def binary(name: str) -> Path:
    return paths.binaries_dir() / "bin" / name


def stages_file() -> Path:
    return paths.binaries_dir() / "kwok-stages.yaml"


def storage_class_file() -> Path:
    return paths.binaries_dir() / "kwok-storage-class.yaml"


def is_built() -> bool:
    root = paths.binaries_dir()
    return (root / "COMPLETE").exists() and all((root / "bin" / c.name).exists() for c in COMPONENTS)


def find_go() -> str:
    go = os.environ.get("GO") or shutil.which("go")
    if not go:
        raise BuildError(
            "Go toolchain not found: the local control plane is built from source with Go.\n"
            "Install Go 1.24 or newer (https://go.dev/doc/install) and put `go` on PATH, or set GO=/path/to/go.\n"
            "Or skip the build entirely by pointing KUBECONFIG at an existing cluster."
        )
    return go


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


@contextmanager
def staged(root: Path, key: str) -> Iterator[Path]:
    """A work directory beside `root` that replaces it, marked COMPLETE with `key`, only when the body finishes:
    a killed or failed build leaves the cache as it was."""
    tmp = Path(tempfile.mkdtemp(prefix=".building-", dir=root.parent))
    try:
        yield tmp
        (tmp / "COMPLETE").write_text(key + "\n")
        if root.exists():
            shutil.rmtree(root)
        tmp.rename(root)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def _log(msg: str) -> None:
    print(f"[cluster build] {msg}", file=sys.stderr, flush=True)


def _go_env(go: str) -> dict[str, str]:
    env = dict(os.environ)
    env["CGO_ENABLED"] = "0"
    # go.sum is committed and complete: refuse to change it during a build.
    env["GOFLAGS"] = "-mod=readonly"
    # etcd's wrapper needs a newer go line than Kubernetes'; let the go command fetch that toolchain
    # from the module proxy when the local one is older.
    env.setdefault("GOTOOLCHAIN", "auto")
    return env


def _module_dir(go: str, module: str, env: dict[str, str]) -> Path:
    out = subprocess.run(
        [go, "list", "-m", "-f", "{{.Dir}}", module],
        cwd=paths.GOMOD_DIR / "kwok",
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode != 0 or not out.stdout.strip():
        raise BuildError(f"cannot locate the {module} module: {out.stderr.strip()}")
    return Path(out.stdout.strip())


def build(force: bool = False) -> Path:
    """Builds every component that the cache lacks; returns the binaries directory."""
    root = paths.binaries_dir()
    with _locked(paths.cache_root() / "control-plane" / ".build.lock"):
        if is_built() and not force:
            return root
        go = find_go()
        env = _go_env(go)
        total_start = time.monotonic()
        _log(f"building the control plane into {root} (first time only; about 11 minutes on 2 cores)")
        with staged(root, paths.version_key()) as tmp:
            (tmp / "bin").mkdir()
            for i, comp in enumerate(COMPONENTS, 1):
                start = time.monotonic()
                _log(f"[{i}/{len(COMPONENTS)}] {comp.name} ...")
                cmd = [go, "build", "-trimpath", "-ldflags", comp.ldflags, "-o", str(tmp / "bin" / comp.name), comp.package]
                proc = subprocess.run(cmd, cwd=paths.GOMOD_DIR / comp.module_dir, env=env, capture_output=True, text=True)
                if proc.returncode != 0:
                    raise BuildError(f"building {comp.name} failed:\n{proc.stderr[-4000:]}")
                _log(f"[{i}/{len(COMPONENTS)}] {comp.name} built in {time.monotonic() - start:.0f} s")
            kwok_src = _module_dir(go, "sigs.k8s.io/kwok", env) / "kustomize" / "stage"
            docs = [(kwok_src / f).read_text().strip() for f in KWOK_STAGE_FILES]
            (tmp / "kwok-stages.yaml").write_text("\n---\n".join(docs) + "\n")
            shutil.copyfile(kwok_src / KWOK_STORAGE_CLASS, tmp / "kwok-storage-class.yaml")
        _log(f"control plane built in {time.monotonic() - total_start:.0f} s")
        return root
