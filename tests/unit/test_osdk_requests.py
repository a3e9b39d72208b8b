"""operator_sdk.util.osdk_metric and requeue_after: their action plugins (what the runtime runs, in the
controller) answer as their modules do (what runs where the action plugins are not used), for good and
bad arguments alike."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from typing import Any

import pytest

from runner.ansible import COLLECTIONS_DIR

PLUGINS = COLLECTIONS_DIR / "ansible_collections/operator_sdk/util/plugins"
MODULES = PLUGINS / "modules"
# by its path: this process's ansible_collections package stays the one the other tests import
_spec = importlib.util.spec_from_file_location("osdk_requests", PLUGINS / "module_utils/requests.py")
assert _spec and _spec.loader
requests = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(requests)
SPECS = {"osdk_metric": (requests.METRIC_ARG_SPEC, requests.metric_result),
         "requeue_after": (requests.REQUEUE_ARG_SPEC, requests.requeue_result)}


def module_answer(name: str, args: dict[str, Any], tmp_path) -> dict[str, Any]:
    path = tmp_path / "args.json"
    path.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": {**args, "_ansible_module_name": name}}))
    proc = subprocess.run([sys.executable, str(MODULES / f"{name}.py"), str(path)], capture_output=True, text=True,
                          env={"PYTHONPATH": str(COLLECTIONS_DIR)}, timeout=60)
    answer = json.loads(proc.stdout)
    return {k: v for k, v in answer.items() if k in ("failed", "changed", "msg", "osdk_metric", "period")}


def plugin_answer(name: str, args: dict[str, Any]) -> dict[str, Any]:
    spec, result = SPECS[name]
    try:
        return result(requests.validated(args, spec, name))
    except requests.InvalidRequest as exc:
        return {"failed": True, "msg": str(exc)}


@pytest.mark.parametrize(("name", "args"), [
    ("osdk_metric", {"name": "things_total", "description": "Things", "counter": {"increment": True}}),
    ("osdk_metric", {"name": "depth", "description": "d", "gauge": {"set": "3"}, "labels": {"db": "a", "n": None}}),
    ("osdk_metric", {"name": "latency", "description": "l", "histogram": {"observe": 0.5}}),
    ("osdk_metric", {"name": "x", "description": "x"}),  # no metric
    ("osdk_metric", {"name": "x", "description": "x", "gauge": {"set": 1}, "counter": {"add": 1}}),  # two
    ("osdk_metric", {"name": "x", "description": "x", "counter": {"add": -1}}),
    ("osdk_metric", {"name": "1x", "description": "x", "counter": {"add": 1}}),
    ("osdk_metric", {"name": "x", "description": "x", "gauge": {"set": "many"}}),
    ("osdk_metric", {"name": "x", "description": "x", "gauge": {"set": 1}, "labels": {"__bad": "v"}}),
    ("osdk_metric", {"name": "x", "gauge": {"set": 1}}),  # no description
    ("osdk_metric", {"name": "x", "description": "x", "gauge": {"set": 1}, "colour": "red"}),
    ("requeue_after", {"time": "1h30m"}),
    ("requeue_after", {"time": " 500ms "}),
    ("requeue_after", {"time": "soon"}),
    ("requeue_after", {}),
])
def test_the_action_plugin_answers_as_the_module(name: str, args: dict[str, Any], tmp_path) -> None:
    module = module_answer(name, args, tmp_path)
    plugin = plugin_answer(name, args)
    if module.get("failed"):
        assert plugin == {"failed": True, "msg": module["msg"]}
    else:
        assert plugin == {k: v for k, v in module.items() if k != "msg"}
