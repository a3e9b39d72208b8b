"""Tasks the warm run executes itself instead of forking a task worker for them.

Ansible forks a worker for every task, and a task that never leaves the controller pays for that fork,
its templating and the result's trip back through the queue: about 0.03-0.05 s each, and SampleDB's
steady-state run has 13 set_fact and 11 skipped tasks. Two kinds run in the run's own process here, the
way a worker would run them (the same ``TaskExecutor``, a copy of the task, the result sent through the
same queue, so callbacks, job events and registered variables are exactly a worker's):

- the actions that are the controller's alone: set_fact, debug, assert, fail, include_tasks, include_role;
- a task whose ``when`` is false for its host (without a loop: a loop's ``when`` is per item).

Anything else, and anything whose conditional cannot be evaluated here, gets its worker as before.
Templating here may run lookups (kubernetes.core's k8s lookup among them): no connection such a lookup
pooled may reach a later fork, so each in-process step ends by dropping them.
"""

from __future__ import annotations

import inspect
import sys
import traceback
from contextlib import AbstractContextManager, nullcontext
from typing import Any

from ansible.executor.process.worker import WorkerProcess
from ansible.executor.task_executor import TaskExecutor
from ansible.template import Templar
from ansible.utils.fqcn import add_internal_fqcns

try:  # ansible-core 2.19
    from ansible._internal._task import TaskContext as _TaskContext
    from ansible.executor.task_result import _RawTaskResult
except ImportError:  # ansible-core 2.18
    _TaskContext = None
    _RawTaskResult = None

CONTROLLER_ACTIONS = frozenset(add_internal_fqcns(("set_fact", "debug", "assert", "fail", "include_tasks",
                                                   "include_role")))
_KUBERNETES_CORE_CLIENT = "ansible_collections.kubernetes.core.plugins.module_utils.k8s.client"
_EXECUTOR_TAKES_STDIN = "new_stdin" in inspect.signature(TaskExecutor.__init__).parameters
_ORIGINAL_START = WorkerProcess.start


def drop_kubernetes_connections() -> None:
    """Closes the connections kubernetes.core's pooled clients hold in this process: a fork must never
    share a TLS session with its parent."""
    client = sys.modules.get(_KUBERNETES_CORE_CLIENT)
    for k8s_client in getattr(client, "_pool", {}).values():
        try:
            k8s_client.client.client.rest_client.pool_manager.clear()
        except AttributeError:
            pass


def _is_skipped(task: Any, task_vars: dict[str, Any], loader: Any) -> bool:
    if not task.when or task.loop is not None or task.loop_with or task.delegate_to:
        return False
    try:
        if hasattr(task, "_resolve_conditional"):  # ansible-core 2.19, as its TaskExecutor asks
            return not task._resolve_conditional(task.when, task_vars)
        return not task.evaluate_conditional(Templar(loader=loader, variables=task_vars), task_vars)
    except Exception:  # the worker reports it, as it always has
        return False
    finally:
        drop_kubernetes_connections()


def runs_in_process(task: Any, task_vars: dict[str, Any], loader: Any) -> bool:
    return task.action in CONTROLLER_ACTIONS or _is_skipped(task, task_vars, loader)


def _execute(worker: WorkerProcess) -> None:
    # the worker's task is its own copy (a fork's); TaskExecutor templates the one it is given in place
    task = worker._task.copy()
    kwargs: dict[str, Any] = dict(host=worker._host, task=task, job_vars=worker._task_vars,
                                  play_context=worker._play_context, loader=worker._loader,
                                  shared_loader_obj=worker._shared_loader_obj, final_q=worker._final_q,
                                  variable_manager=worker._variable_manager)
    if _EXECUTOR_TAKES_STDIN:
        kwargs["new_stdin"] = None
    context: AbstractContextManager[Any] = _TaskContext(task) if _TaskContext is not None else nullcontext()
    try:
        with context:
            result = TaskExecutor(**kwargs).run()
    except Exception as exc:  # a worker would have died with it; here the task fails and says why
        result = {"failed": True, "msg": f"in-process task error: {exc}", "exception": traceback.format_exc()}
    finally:
        drop_kubernetes_connections()
    if _RawTaskResult is not None:
        worker._final_q.send_task_result(_RawTaskResult(host=worker._host, task=task, return_data=result,
                                                        task_fields=task.dump_attrs()))
    else:
        worker._final_q.send_task_result(worker._host.name, task._uuid, result, task_fields=task.dump_attrs())


def _start(self: WorkerProcess) -> None:
    if runs_in_process(self._task, self._task_vars, self._loader):
        _execute(self)  # never started, so the strategy sees a finished worker and reuses its slot
    else:
        _ORIGINAL_START(self)


def install() -> None:
    WorkerProcess.start = _start
