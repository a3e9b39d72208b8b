"""The kubernetes client as the warm executor's module processes use it: kubeconfigs read with libyaml give
the same configuration, and the discovery cache that processes share keeps what each of them loaded."""

from __future__ import annotations

import json
import multiprocessing
from pathlib import Path

import pytest
import yaml
from kubernetes.config import kube_config
from kubernetes.dynamic import discovery

from runner.execution import warm_kubernetes
from tests.kube import Kube


@pytest.fixture
def installed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kube_config, "yaml", kube_config.yaml)
    monkeypatch.setattr(discovery.Discoverer, "_write_cache", discovery.Discoverer._write_cache)
    monkeypatch.setattr(discovery.Discoverer, "invalidate_cache", discovery.Discoverer.invalidate_cache)
    warm_kubernetes.install()


def test_a_kubeconfig_reads_the_same(kube: Kube, installed: None) -> None:
    text = kube.kubeconfig.read_text()
    assert kube_config.yaml.safe_load(text) == yaml.safe_load(text)
    assert kube_config.yaml.safe_dump is yaml.safe_dump


def _search(cache_file: str, kubeconfig: str, api_version: str, kind: str, started, go, install: bool) -> None:
    """A module process: its client loads the cache, then (once both have) looks one kind up and exits."""
    from kubernetes import config, dynamic

    if install:
        warm_kubernetes.install()

    client = dynamic.DynamicClient(config.new_client_from_config(config_file=kubeconfig), cache_file=cache_file)
    started.release()
    if go.acquire(timeout=60):
        client.resources.get(api_version=api_version, kind=kind)


def _loaded(cache_file: Path) -> set[str]:
    cache = json.loads(cache_file.read_text())
    return {f"{group}/{version}".lstrip("/") for groups in cache["resources"].values()
            for group, versions in groups.items() for version, entry in versions.items() if entry.get("resources")}


def test_processes_keep_each_others_discovery(kube: Kube, tmp_path: Path) -> None:
    """Two module processes start from the same cache and each loads another API group: the file keeps
    both (each used to write back only its own, so the next task fetched the other again)."""
    cache_file = tmp_path / "discovery.json"
    ctx = multiprocessing.get_context("spawn")  # (this process has threads: no fork)
    started, go = ctx.Semaphore(0), [ctx.Semaphore(0), ctx.Semaphore(0)]
    procs = [ctx.Process(target=_search, args=(str(cache_file), str(kube.kubeconfig), v, k, started, go[i], True))
             for i, (v, k) in enumerate((("apps/v1", "Deployment"), ("batch/v1", "Job")))]
    for p in procs:
        p.start()
    for _ in procs:
        assert started.acquire(timeout=60)
    assert not {"apps/v1", "batch/v1"} & _loaded(cache_file)
    for i, p in enumerate(procs):
        go[i].release()
        p.join(60)
        assert p.exitcode == 0, p.exitcode
    assert {"apps/v1", "batch/v1"} <= _loaded(cache_file)


def test_a_refresh_starts_afresh(installed: None) -> None:
    mine = {"library_version": "1", "resources": {"apis": {"apps": {"v1": {"resources": {}}}}}}
    theirs = {"library_version": "1", "resources": {"apis": {"apps": {"v1": {"resources": {"Deployment": [1]}}},
                                                             "gone.example.com": {"v1": {"resources": {"X": [1]}}}}}}
    warm_kubernetes._merge_loaded(mine, theirs)
    assert mine["resources"]["apis"] == {"apps": {"v1": {"resources": {"Deployment": [1]}}}}  # no group it dropped
    other_version = {"library_version": "2", "resources": {"apis": {"apps": {"v1": {"resources": {}}}}}}
    warm_kubernetes._merge_loaded(other_version, theirs)
    assert other_version["resources"]["apis"]["apps"]["v1"]["resources"] == {}
