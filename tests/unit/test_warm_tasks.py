"""Tasks the warm executor runs in its own process (set_fact, debug, assert, fail, includes, and tasks whose
`when` is false) behave as they do in Ansible's own task workers: the same results, registered variables,
job events and no_log censoring as a cold run (ansible-runner starting ansible-playbook)."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest

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
"""


def _summary(result: RunResult) -> list[tuple]:
    rows = []
    for ev in sorted(result.events, key=lambda e: e.get("created", "")):
        data = ev.get("event_data") or {}
        if ev.get("event", "").startswith("runner_on_") or ev.get("event") == "runner_item_on_ok":
            res = data.get("res") or {}
            rows.append((ev["event"], data.get("task"), res.get("changed"), res.get("msg")))
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
    # cold first: the warm executor puts its run environment into this process's for its forkserver
    for name, cls in (("cold", ColdExecutor), ("warm", WarmExecutor)):
        d = tmp_path_factory.mktemp(name)
        (d / "playbook.yml").write_text(PLAYBOOK)
        (d / "included.yml").write_text("- set_fact: {included_ran: true}\n")
        out[name] = asyncio.run(_run(cls, d))
    return out


def test_in_process_tasks_give_a_workers_results(runs: dict[str, RunResult]) -> None:
    warm, cold = runs["warm"], runs["cold"]
    assert warm.outcome.ok, warm.outcome.failures
    assert warm.outcome.result and cold.outcome.result
    assert {k: v for k, v in warm.outcome.result.items() if k != "completion"} == \
        {k: v for k, v in cold.outcome.result.items() if k != "completion"} == \
        {"ok": 11, "changed": 0, "skipped": 1, "failures": 0}
    assert _summary(warm) == _summary(cold)
    assert ("runner_on_skipped", "skipped by its condition", None, None) in _summary(warm)


def test_a_no_log_task_in_process_leaves_no_secret(runs: dict[str, RunResult]) -> None:
    warm = runs["warm"]
    assert SECRET not in json.dumps(warm.events)
    assert SECRET not in (warm.artifact_dir / "stdout").read_text()


@pytest.mark.parametrize(("task", "task_vars", "in_process"), [
    ({"set_fact": {"x": 1}}, {}, True),
    ({"debug": {"msg": "hi"}}, {}, True),
    ({"include_tasks": "other.yml"}, {}, True),
    ({"command": "true", "when": "a == 2"}, {"a": 1}, True),  # skipped: no worker needed to say so
    ({"command": "true", "when": "a == 1"}, {"a": 1}, False),
    ({"command": "true"}, {}, False),
    ({"debug": {"msg": "hi"}, "until": "x is defined", "retries": 3}, {}, False),  # would sleep in the strategy
    ({"command": "true", "when": "item == 2", "loop": [1, 2]}, {}, False),  # a loop's `when` is per item
    ({"command": "true", "when": "undefined_thing"}, {}, False),  # the worker reports the error
    ({"kubernetes.core.k8s_info": {"kind": "Pod"}, "when": "a == 2", "delegate_to": "other"}, {"a": 1}, False),
])
def test_which_tasks_run_in_process(task: dict, task_vars: dict, in_process: bool) -> None:
    from ansible.parsing.dataloader import DataLoader
    from ansible.playbook.task import Task

    from runner.execution import warm_tasks

    loader = DataLoader()
    assert warm_tasks.runs_in_process(Task.load(task, loader=loader), task_vars, loader) is in_process


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
