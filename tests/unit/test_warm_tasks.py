"""Tasks the warm executor runs in its own process (set_fact, debug, assert, fail, includes, and tasks whose
`when` is false) behave as they do in Ansible's own task workers: the same results, registered variables,
job events and no_log censoring as a cold run (ansible-runner starting ansible-playbook)."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from runner.ansible import COLLECTIONS_DIR
from runner.execution.base import RunRequest, RunResult
from runner.execution.cold import ColdExecutor
from runner.execution.warm import WarmExecutor

SECRET = "s3cr3t-never-shown"

PLAYBOOK = f"""
- hosts: localhost
  gather_facts: false
  tasks:
    - set_fact: {{a: 1}}
    - debug: {{msg: "a is {{{{ a }}}}"}}
    - name: skipped by its condition
      command: "false"
      when: a == 2
    - set_fact: {{b: "{{{{ item }}}}"}}
      loop: [1, 2]
      register: looped
    - assert: {{that: ["b | int == 2", "looped.results | length == 2"]}}
    - include_tasks: included.yml
      when: a == 1
    - name: a secret
      set_fact: {{password: "{SECRET}"}}
      no_log: true
    - fail: {{msg: "boom {{{{ a }}}}"}}
      ignore_errors: true
      register: failed
    - assert: {{that: ["failed is failed", "failed.msg == 'boom 1'", "included_ran"]}}
    - name: a module still runs
      command: "true"
      changed_when: false
    - name: true only once the connection's variables are in (TaskExecutor adds them)
      command: "true"
      changed_when: false
      when: ansible_connection is defined and ansible_timeout is defined
    - name: a loop with no items
      command: "false"
      loop: "{{{{ [1, 2] | select('gt', 5) | list }}}}"
    - name: an included file for each item
      include_tasks: included.yml
      loop: [1, 2]
    - name: a loop with items still runs its module
      command: "echo {{{{ item }}}}"
      changed_when: false
      loop: "{{{{ [1, 2, 7] | select('gt', 5) | list }}}}"
    - name: a metric (operator_sdk.util's action plugin)
      operator_sdk.util.osdk_metric:
        name: things_total
        description: Things
        labels: {{kind: "{{{{ a }}}}"}}
        gauge: {{set: "{{{{ a + 1 }}}}"}}
      loop: [1]
    - name: a metric with two types
      operator_sdk.util.osdk_metric: {{name: x, description: x, gauge: {{set: 1}}, counter: {{increment: true}}}}
      ignore_errors: true
    - name: a metric with an argument of the wrong type
      operator_sdk.util.osdk_metric: {{name: x, description: x, gauge: {{set: "many"}}}}
      ignore_errors: true
    - operator_sdk.util.requeue_after: {{time: 30s}}
    - operator_sdk.util.requeue_after: {{time: soon}}
      ignore_errors: true
"""


def _summary(result: RunResult) -> list[tuple]:
    rows = []
    for ev in sorted(result.events, key=lambda e: e.get("created", "")):
        data = ev.get("event_data") or {}
        if ev.get("event", "").startswith("runner_on_") or ev.get("event") == "runner_item_on_ok":
            res = data.get("res") or {}
            rows.append((ev["event"], data.get("task"), res.get("changed"), res.get("msg"),
                         res.get("osdk_metric") or next((r.get("osdk_metric") for r in res.get("results", [])), None),
                         res.get("period"), res.get("skipped_reason")))
    return rows


async def _run(executor_cls: type, tmp_path: Path) -> RunResult:
    executor = executor_cls(1, dict(os.environ))
    await executor.start()
    try:
        request = RunRequest(ident="run", private_data_dir=tmp_path, playbook=tmp_path / "playbook.yml",
                             extravars={}, keep_artifacts=1)
        return await executor.run(request)
    finally:
        await executor.stop()


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, RunResult]:
    out = {}
    before = dict(os.environ)
    try:
        # cold first: the warm executor puts its run environment into this process's for its forkserver
        for name, cls in (("cold", ColdExecutor), ("warm", WarmExecutor)):
            d = tmp_path_factory.mktemp(name)
            (d / "playbook.yml").write_text(PLAYBOOK)
            (d / "included.yml").write_text("- set_fact: {included_ran: true}\n")
            # operator_sdk.util beside the playbook: this process's forkserver may predate this test's environment
            (d / "collections").symlink_to(COLLECTIONS_DIR)
            out[name] = asyncio.run(_run(cls, d))
    finally:  # not for later tests (molecule's ansible-playbook would find ansible-runner's callback in it)
        os.environ.clear()
        os.environ.update(before)
    return out


def test_in_process_tasks_give_a_workers_results(runs: dict[str, RunResult]) -> None:
    warm, cold = runs["warm"], runs["cold"]
    assert warm.outcome.ok, warm.outcome.failures
    assert warm.outcome.result and cold.outcome.result
    assert {k: v for k, v in warm.outcome.result.items() if k != "completion"} == \
        {k: v for k, v in cold.outcome.result.items() if k != "completion"} == \
        {"ok": 21, "changed": 1, "skipped": 2, "failures": 0}
    assert _summary(warm) == _summary(cold)
    summary = _summary(warm)
    assert ("runner_on_skipped", "skipped by its condition", None, None, None, None, None) in summary
    assert ("runner_on_skipped", "a loop with no items", None, None, None, None, None) in summary
    assert ("runner_on_ok", "a loop with items still runs its module", False, "All items completed", None, None,
            None) in summary
    assert ("runner_item_on_ok", "a metric (operator_sdk.util's action plugin)", True, None,
            {"name": "things_total", "description": "Things", "gauge": {"set": 2.0}, "labels": {"kind": "1"}},
            None, None) in summary
    assert ("runner_on_failed", "a metric with two types", False, "only one metric can be processed at a time",
            None, None, None) in summary
    wrong_type = next(row for row in summary if row[1] == "a metric with an argument of the wrong type"
                      and row[0] != "runner_on_start")
    assert wrong_type[0] == "runner_on_failed" and "'set'" in wrong_type[3] and "to float" in wrong_type[3]
    assert ("runner_on_ok", "operator_sdk.util.requeue_after", False, None, None, "30s", None) in summary
    assert ("runner_on_failed", "operator_sdk.util.requeue_after", False,
            "invalid time input 'soon': expected a duration such as 30s, 5m or 1h30m", None, None, None) in summary


def test_a_no_log_task_in_process_leaves_no_secret(runs: dict[str, RunResult]) -> None:
    warm = runs["warm"]
    assert SECRET not in json.dumps(warm.events)
    assert SECRET not in (warm.artifact_dir / "stdout").read_text()


@pytest.fixture
def our_collection() -> Iterator[None]:
    """operator_sdk.util resolvable, as a run's Ansible finds it; this process as it was afterwards."""
    from ansible.utils.collection_loader._collection_finder import _AnsibleCollectionFinder

    # (another test's templating may have installed Ansible's default finder, which knows no operator_sdk.util)
    _AnsibleCollectionFinder._remove()
    for name in [n for n in sys.modules if n.startswith("ansible_collections")]:
        del sys.modules[name]  # (its ansible_collections package has that finder's paths)
    before = set(sys.modules)
    _AnsibleCollectionFinder(paths=[str(COLLECTIONS_DIR)])._install()
    yield
    _AnsibleCollectionFinder._remove()
    for name in set(sys.modules) - before:
        if name.startswith("ansible_collections"):
            del sys.modules[name]


@pytest.mark.parametrize(("task", "task_vars", "in_process"), [
    ({"set_fact": {"x": 1}}, {}, True),
    ({"debug": {"msg": "hi"}}, {}, True),
    ({"include_tasks": "other.yml"}, {}, True),
    ({"command": "true", "when": "a == 2"}, {"a": 1}, True),  # skipped: no worker needed to say so
    ({"command": "true", "when": "a == 1"}, {"a": 1}, False),
    ({"command": "true"}, {}, False),
    ({"debug": {"msg": "hi"}, "until": "x is defined", "retries": 3}, {}, False),  # would sleep in the strategy
    # a loop's items are templated in process: with none, the task is skipped there; with some, a module's task
    # gets its worker before the first (the run's tasks below show both)
    ({"command": "true", "loop": "{{ things }}"}, {}, True),
    ({"command": "true", "when": "item == 2", "loop": [1, 2]}, {}, True),  # (a loop's `when` is per item)
    ({"command": "true", "with_items": []}, {}, False),  # a lookup: left to the worker
    ({"operator_sdk.util.osdk_metric": {"name": "x", "description": "x", "gauge": {"set": 1}}}, {}, True),
    ({"operator_sdk.util.requeue_after": {"time": "1s"}}, {}, True),
    ({"operator_sdk.util.k8s_status": {"kind": "X", "name": "x"}}, {}, True),
    ({"operator_sdk.util.k8s_event": {"name": "x", "reason": "X", "message": "m"}}, {}, False),  # a module
    ({"command": "true", "when": "undefined_thing"}, {}, False),  # the worker reports the error
    ({"kubernetes.core.k8s_info": {"kind": "Pod"}, "when": "a == 2", "delegate_to": "other"}, {"a": 1}, False),
])
def test_which_tasks_run_in_process(task: dict, task_vars: dict, in_process: bool, our_collection: None) -> None:
    from ansible.parsing.dataloader import DataLoader
    from ansible.playbook.task import Task

    from runner.execution import warm_tasks

    loader = DataLoader()
    assert warm_tasks.runs_in_process(Task.load(task, loader=loader), task_vars, loader) is in_process


def test_only_this_runtimes_operator_sdk_util_runs_in_process(our_collection: None, tmp_path: Path) -> None:
    from ansible.plugins.loader import action_loader

    from runner.execution import warm_tasks

    for name in warm_tasks.OWN_ACTIONS:
        assert warm_tasks.is_own_plugin(action_loader.get(name, class_only=True))
    project = tmp_path / "ansible_collections/operator_sdk/util/plugins/action/osdk_metric.py"
    project.parent.mkdir(parents=True)
    project.write_text("from ansible.plugins.action import ActionBase\nclass ActionModule(ActionBase):\n    pass\n")
    spec = importlib.util.spec_from_file_location("project_osdk_metric", project)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # as Ansible's plugin loader registers them
    try:
        spec.loader.exec_module(module)
        assert not warm_tasks.is_own_plugin(module.ActionModule)
    finally:
        del sys.modules[spec.name]


def test_pooled_kubernetes_connections_are_closed(kube) -> None:
    """After templating in the run's process (a k8s lookup), no pooled connection may reach a later fork."""
    import kubernetes.client
    from ansible_collections.kubernetes.core.plugins.module_utils.k8s import client as k8s_client

    from runner.execution import warm_tasks

    k8s_client.get_api_client(kubeconfig=os.environ["KUBECONFIG"])  # (the default path is read at import)
    pooled = list(k8s_client._pool.values())
    assert pooled
    for dynamic_client in pooled:
        kubernetes.client.VersionApi(dynamic_client.client).get_code()
    assert any(len(d.client.rest_client.pool_manager.pools) for d in pooled)
    warm_tasks.drop_kubernetes_connections()
    assert not any(len(d.client.rest_client.pool_manager.pools) for d in pooled)
