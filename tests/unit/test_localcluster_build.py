"""The local control plane's build and bookkeeping, without starting anything."""

from __future__ import annotations

import pytest

from localcluster import build, paths


def test_no_go_toolchain_gives_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GO", raising=False)
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(build.BuildError) as err:
        build.find_go()
    msg = str(err.value)
    assert "Go toolchain not found" in msg
    assert "Install Go 1.24 or newer" in msg and "KUBECONFIG" in msg


def test_cache_is_keyed_by_every_version(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.setenv("PLAYBOOK_OPERATOR_CACHE", str(tmp_path))
    root = paths.binaries_dir()
    assert root.parent == tmp_path / "control-plane"
    for version in (paths.KUBERNETES_VERSION, paths.ETCD_VERSION, paths.KWOK_VERSION):
        assert version in root.name
    assert not build.is_built()  # an empty cache is never mistaken for a built one


def test_wrapper_modules_pin_the_documented_versions() -> None:
    k8s = (paths.GOMOD_DIR / "kubernetes" / "go.mod").read_text()
    assert f"k8s.io/kubernetes v{paths.KUBERNETES_VERSION}" in k8s
    # every staging module is replaced by its published version, or `go build` cannot resolve them
    assert "k8s.io/client-go => k8s.io/client-go v0.34.4" in k8s
    assert f"go.etcd.io/etcd/server/v3 v{paths.ETCD_VERSION}" in (paths.GOMOD_DIR / "etcd" / "go.mod").read_text()
    assert f"sigs.k8s.io/kwok v{paths.KWOK_VERSION}" in (paths.GOMOD_DIR / "kwok" / "go.mod").read_text()
    for mod in ("kubernetes", "etcd", "kwok"):
        assert (paths.GOMOD_DIR / mod / "go.sum").stat().st_size > 0
