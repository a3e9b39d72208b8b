"""What the kubernetes client repeats in every kubernetes.core module process, done once or kept.

Installed in the warm executor's forkserver, so every run and module process has it. Both change how the
client reads and keeps its own files, never what it asks the API server or what a module returns.
"""

from __future__ import annotations

import json
import os
import types
from typing import Any

import yaml


def kubeconfig_with_libyaml() -> None:
    """kubernetes.config reads a kubeconfig with PyYAML's pure-Python loader: ~8 ms in every module
    process. libyaml's safe loader builds the same data."""
    if not getattr(yaml, "__with_libyaml__", False):
        return
    from kubernetes.config import kube_config

    class KubeconfigYaml(types.ModuleType):
        def __getattr__(self, name: str) -> object:
            return getattr(yaml, name)

        @staticmethod
        def safe_load(stream: object) -> object:
            return yaml.load(stream, Loader=yaml.CSafeLoader)

    kube_config.yaml = KubeconfigYaml("yaml", "PyYAML, loading with libyaml")


def _merge_loaded(mine: dict[str, Any], theirs: dict[str, Any]) -> None:
    """Into ``mine``, the resources of each API group version ``theirs`` has loaded and ``mine`` has not."""
    if theirs.get("library_version") != mine.get("library_version"):
        return
    on_disk = theirs.get("resources") or {}
    for prefix, groups in (mine.get("resources") or {}).items():
        for group, versions in (groups or {}).items():
            for version, entry in (versions or {}).items():
                other = ((on_disk.get(prefix) or {}).get(group) or {}).get(version)
                if isinstance(entry, dict) and not entry.get("resources") and isinstance(other, dict) \
                        and other.get("resources"):
                    entry["resources"] = other["resources"]


def discovery_cache_shared() -> None:
    """kubernetes.core keeps the API's discovery in one file per cluster and user. A module process loads
    a group version's resources when it first needs them and writes the whole file back, so processes
    that each loaded another group overwrote each other's: nearly every k8s task fetched a group again and
    rewrote the file (~15 ms), and a process could read a file half-written (and then rediscover all).
    Here the file keeps what any process loaded, for the group versions the writer still knows (a refresh,
    after a miss, still starts afresh), and is replaced in one step."""
    from kubernetes.dynamic import discovery

    original_invalidate = discovery.Discoverer.invalidate_cache

    def invalidate_cache(self: Any) -> None:
        self._playbook_operator_refreshed = True
        original_invalidate(self)

    def _write_cache(self: Any) -> None:
        path = self._Discoverer__cache_file
        try:
            mine = json.loads(json.dumps(self._cache, cls=discovery.CacheEncoder))
            if not getattr(self, "_playbook_operator_refreshed", False):
                try:
                    with open(path) as f:
                        _merge_loaded(mine, json.load(f))
                except (OSError, ValueError):
                    pass
            self._playbook_operator_refreshed = False
            partial = f"{path}.{os.getpid()}"
            with open(partial, "w") as f:
                json.dump(mine, f)
            os.replace(partial, path)
        except Exception:  # as the client's own: a cache that cannot be written is no error
            pass

    discovery.Discoverer.invalidate_cache = invalidate_cache
    discovery.Discoverer._write_cache = _write_cache


def install() -> None:
    kubeconfig_with_libyaml()
    discovery_cache_shared()
