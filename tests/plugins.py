"""The SampleDB roles' and playbook's own Ansible plugins (filter and test plugins are plain Python modules), loaded
by path for the tests that call their functions directly."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def plugin(path: str) -> ModuleType:
    """The module at ``path`` (relative to the repository, e.g. roles/common/filter_plugins/sampledb.py)."""
    spec = importlib.util.spec_from_file_location(path.replace("/", "_").removesuffix(".py"), ROOT / path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
