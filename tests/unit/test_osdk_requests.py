"""operator_sdk.util.osdk_metric, requeue_after and k8s_status: their action plugins (what the runtime runs, in
the controller) answer as their modules do (what runs where the action plugins are not used), for good and
bad arguments alike, and mask no_log values as AnsibleModule does."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from runner.ansible import COLLECTIONS_DIR

PLUGINS = COLLECTIONS_DIR / "ansible_collections/operator_sdk/util/plugins"
MODULES = PLUGINS / "modules"


def _by_path(name: str, path: Path) -> Any:
    """A plugin file's module, by its path: this process's ansible_collections package stays the one the other
    tests import."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


requests = _by_path("osdk_requests", PLUGINS / "module_utils/requests.py")
controller = _by_path("osdk_controller", PLUGINS / "plugin_utils/controller.py")
WORK = {"osdk_metric": (requests.METRIC_ARG_SPEC, requests.metric),
        "requeue_after": (requests.REQUEUE_ARG_SPEC, requests.requeue)}


def module_answer(name: str, args: dict[str, Any], tmp_path) -> dict[str, Any]:
    path = tmp_path / "args.json"
    path.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": {**args, "_ansible_module_name": name}}))
    proc = subprocess.run([sys.executable, str(MODULES / f"{name}.py"), str(path)], capture_output=True, text=True,
                          env={"PYTHONPATH": str(COLLECTIONS_DIR)}, timeout=60)
    answer = json.loads(proc.stdout)
    return {k: v for k, v in answer.items() if k in ("failed", "changed", "msg", "osdk_metric", "period", "error")}


def plugin_answer(name: str, args: dict[str, Any]) -> dict[str, Any]:
    spec, work = WORK[name]
    return controller.answer(work, args, spec, name)


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
    assert plugin == {k: v for k, v in module.items() if not (k == "msg" and not module.get("failed"))}


@pytest.mark.parametrize("args", [
    {"kind": "SampleDB", "name": "db", "conditions": [{"type": "Ready", "status": "Maybe"}]},
    {"kind": "SampleDB", "name": "db", "conditions": [{"type": "Ready", "status": "True", "reason": "not camel"}]},
    {"kind": "SampleDB", "name": "db", "conditions": [{"type": "Ready", "status": "True", "colour": "red"}]},
    {"kind": "SampleDB", "name": "db", "status": {"conditions": []}, "conditions": []},
    {"kind": "SampleDB", "name": "db", "status": {"phase": "Ready"}, "colour": "red"},
    {"name": "db", "status": {"phase": "Ready"}},
])
def test_k8s_status_refuses_what_its_module_refuses(args: dict[str, Any], tmp_path: Path) -> None:
    """(Before any API call: what the module and the plugin do with the API is one function, module_utils/status.)"""
    module = module_answer("k8s_status", args, tmp_path)
    script = ("import json, sys\n"
              "from ansible_collections.operator_sdk.util.plugins.module_utils.status import STATUS_ARG_SPEC, report\n"
              "from ansible_collections.operator_sdk.util.plugins.plugin_utils.controller import answer\n"
              "print(json.dumps(answer(report, json.loads(sys.argv[1]), STATUS_ARG_SPEC, 'k8s_status')))\n")
    proc = subprocess.run([sys.executable, "-c", script, json.dumps(args)], capture_output=True, text=True,
                          env={"PYTHONPATH": str(COLLECTIONS_DIR)}, timeout=60)
    plugin = json.loads(proc.stdout)
    assert module["failed"] and plugin == {"failed": True, "msg": module["msg"],
                                           **({"error": module["error"]} if "error" in module else {})}


def test_no_log_values_are_masked_in_the_controllers_answer() -> None:
    spec = {"api_key": {"type": "str", "no_log": True}, "name": {"type": "str"}}

    def work(module: Any) -> None:
        module.fail_json(msg=f"could not use {module.params['api_key']} for {module.params['name']}")

    assert controller.answer(work, {"api_key": "s3cr3t-token", "name": "db"}, spec, "x") == \
        {"failed": True, "msg": "could not use ******** for db"}
