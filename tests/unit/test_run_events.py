"""What a run's result keeps of its job events: what the operator reads of them (outcomes, failure messages,
requeues, metrics, the log), not every registered result, which may be megabytes each."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

from runner.execution.base import RunRequest, RunResult
from runner.execution.warm import WarmExecutor

PLAYBOOK = """
- hosts: localhost
  gather_facts: false
  tasks:
    - name: large results (a k8s_info of thousands of pods, say), each below ansible-runner's 700 KB cut
      set_fact: {big: "{{ item * 600000 }}"}
      loop: [a, b, c, d, e]
    - name: a failure, ignored
      fail: {msg: "this one is ignored"}
      ignore_errors: true
    - name: come back
      operator_sdk.util.requeue_after: {time: 1m}
"""


async def _run(tmp_path: Path) -> RunResult:
    executor = WarmExecutor(1, dict(os.environ))
    await executor.start()
    try:
        return await executor.run(RunRequest(ident="run", private_data_dir=tmp_path, playbook=tmp_path / "playbook.yml",
                                             extravars={}, keep_artifacts=1))
    finally:
        await executor.stop()


def test_a_runs_events_are_kept_small(tmp_path: Path) -> None:
    from runner.ansible import COLLECTIONS_DIR

    (tmp_path / "playbook.yml").write_text(PLAYBOOK)
    (tmp_path / "collections").symlink_to(COLLECTIONS_DIR)
    before = dict(os.environ)
    try:
        result = asyncio.run(_run(tmp_path))
    finally:
        os.environ.clear()
        os.environ.update(before)
    assert result.outcome.ok and result.outcome.requeue_after == 60 and result.outcome.result
    assert len(json.dumps(result.events)) < 100_000
    failed = [e for e in result.events if e["event"] == "runner_on_failed"]
    assert failed[0]["event_data"]["res"]["msg"] == "this one is ignored" and failed[0]["event_data"]["ignore_errors"]
