"""Tasks the warm run executes itself instead of forking a task worker for them.

Ansible forks a worker for every task, and a task that never leaves the controller pays for that fork,
its templating and the result's trip back through the queue: about 0.03-0.05 s each, and SampleDB's
steady-state run has 13 set_fact and 11 skipped tasks. Two kinds run in the run's own process here, the
way a worker would run them (the same ``TaskExecutor``, a copy of the task and its parents, the result sent
through the same queue, so callbacks, job events and registered variables are exactly a worker's):

- ansible-core's own set_fact, debug, assert and fail, and include_tasks and include_role;
- this runtime's own operator_sdk.util.osdk_metric, requeue_after and k8s_status, whose action plugins do
  their modules' work in the controller (a project's own collection of that name gets workers);
- a task whose ``when`` is false for its host (without a loop: a loop's ``when`` is per item), and a task
  whose loop has no items. Should ``TaskExecutor`` find one to run after all (it adds connection variables
  before evaluating ``when``), it stops before the action and the task gets its worker.

Anything else gets its worker as before, and so does a task with ``until``, ``timeout`` or a loop pause
(they would sleep in the strategy's thread) or whose conditional cannot be evaluated here (the worker
reports why). Templating here may run lookups (kubernetes.core's k8s lookup among them): no connection
such a lookup pooled may reach a later fork, so each in-process step ends by dropping them.
"""
from __future__ import annotations

import inspect
import os
import sys
import traceback
from contextlib import AbstractContextManager, nullcontext
from typing import Any

from ansible.executor.process.worker import WorkerProcess
from ansible.executor.task_executor import TaskExecutor
from ansible.template import Templar
from ansible.utils.fqcn import add_internal_fqcns

from ..ansible import COLLECTIONS_DIR

try:  # ansible-core 2.19
    from ansible._internal._errors import _error_utils
    from ansible._internal._task import TaskContext as _TaskContext
    from ansible.executor.task_result import _RawTaskResult
except ImportError:  # ansible-core 2.18
    _error_utils = None
    _TaskContext = None
    _RawTaskResult = None

# ansible-core's own plugins only: a project's action_plugins/debug.py resolves to another name
CONTROLLER_ACTIONS = frozenset(f"ansible.builtin.{a}" for a in ("set_fact", "debug", "assert", "fail"))
INCLUDES = frozenset(add_internal_fqcns(("include_tasks", "include_role")))  # never a plugin of a project's
OWN_ACTIONS = frozenset(f"operator_sdk.util.{a}" for a in ("osdk_metric", "requeue_after", "k8s_status"))
OWN_ACTION_PLUGINS = os.path.join(os.path.realpath(COLLECTIONS_DIR), "ansible_collections", "operator_sdk", "util", "plugins", "action", "")
KUBERNETES_CORE_CLIENT = "ansible_collections.kubernetes.core.plugins.module_utils.k8s.client"
_EXECUTOR_TAKES_STDIN = "new_stdin" in inspect.signature(TaskExecutor.__init__).parameters
_ORIGINAL_START = WorkerProcess.start


def drop_kubernetes_connections() -> None:
    """Closes the connections kubernetes.core's pooled clients hold in this process: a fork must never
    share a TLS session with its parent."""
    client = sys.modules.get(KUBERNETES_CORE_CLIENT)
    for dynamic_client in getattr(client, "_pool", {}).values():  # K8SDynamicClient -> ApiClient -> RESTClientObject
        dynamic_client.client.rest_client.pool_manager.clear()


def _resolved_action(task: Any) -> str | None:
    attrs = vars(task)  # 2.19's resolved_action property warns when asked too early
    return attrs.get("_resolved_action", attrs.get("resolved_action"))


def _waits(task: Any) -> bool:
    """Retries, pauses and timeouts would sleep (or set an alarm) in the strategy's own thread."""
    return bool(task.until or task.timeout or (task.loop_control and task.loop_control.pause))


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


def is_own_plugin(cls: type) -> bool:
    """An action plugin of this runtime's operator_sdk.util (not of a project's collection of that name)."""
    try:
        return os.path.realpath(inspect.getfile(cls)).startswith(OWN_ACTION_PLUGINS)
    except TypeError:  # no file known for it
        return False


def _loops(task: Any) -> bool:
    """A ``loop`` (not a ``with_*`` lookup). TaskExecutor templates its items here: with none, it reports the
    task skipped without an action; with some, a module's task gets its worker before the first item."""
    return task.loop is not None and not task.loop_with and not task.delegate_to


def _acts_here(task: Any) -> bool:
    """Its action runs in the controller: an include, ansible-core's controller actions, our action plugins."""
    return task.action in INCLUDES or _resolved_action(task) in CONTROLLER_ACTIONS | OWN_ACTIONS


def runs_in_process(task: Any, task_vars: dict[str, Any], loader: Any) -> bool:
    if _waits(task):
        return False
    return _acts_here(task) or _is_skipped(task, task_vars, loader) or _loops(task)


class _NeedsWorker(BaseException):
    """TaskExecutor found the task's `when` true after all (it adds connection variables before evaluating
    it), or its loop has items: a module must not run in this process. A BaseException, so TaskExecutor does
    not report it."""


class _ControllerTaskExecutor(TaskExecutor):
    def _run_loop(self, items: list[Any]) -> Any:
        if not _acts_here(self._task):
            raise _NeedsWorker
        return super()._run_loop(items)

    def _get_action_handler_with_module_context(self, templar: Any) -> Any:
        action = _resolved_action(self._task)
        if action not in CONTROLLER_ACTIONS | OWN_ACTIONS:
            raise _NeedsWorker
        found = super()._get_action_handler_with_module_context(templar)
        if action in OWN_ACTIONS and not is_own_plugin(type(found[0])):
            raise _NeedsWorker  # a project's own operator_sdk.util: its plugin may do anything
        return found


def _error_result(exc: Exception) -> dict[str, Any]:
    if _error_utils is not None:
        return _error_utils.result_dict_from_exception(exc)
    return {"failed": True, "msg": f"in-process task error: {exc}", "exception": traceback.format_exc()}


def _send(worker: WorkerProcess, task: Any, result: dict[str, Any], task_fields: dict[str, Any]) -> None:
    if _RawTaskResult is not None:
        worker._final_q.send_task_result(_RawTaskResult(host=worker._host, task=task, return_data=result,
                                                        task_fields=task_fields))
    else:
        worker._final_q.send_task_result(worker._host.name, task._uuid, result, task_fields=task_fields)


def _execute(worker: WorkerProcess) -> bool:
    """Runs the worker's task here, as its fork would; False when it needs the fork after all."""
    # TaskExecutor templates the task it is given, and its parents, in place: a fork's are its own copies
    task = worker._task.copy(exclude_tasks=True)
    kwargs: dict[str, Any] = dict(host=worker._host, task=task, job_vars=worker._task_vars,
                                  play_context=worker._play_context, loader=worker._loader,
                                  shared_loader_obj=worker._shared_loader_obj, final_q=worker._final_q,
                                  variable_manager=worker._variable_manager)
    if _EXECUTOR_TAKES_STDIN:
        kwargs["new_stdin"] = None
    context: AbstractContextManager[Any] = _TaskContext(task) if _TaskContext is not None else nullcontext()
    try:
        with context:
            result = _ControllerTaskExecutor(**kwargs).run()
    except _NeedsWorker:
        return False
    except Exception as exc:  # a worker would have died with it; here the task fails and says why
        result = _error_result(exc)
    finally:
        drop_kubernetes_connections()
    try:
        _send(worker, task, result, task.dump_attrs())
    except Exception as exc:  # as the worker does when a result cannot be pickled
        _send(worker, task, _error_result(exc), {})
    return True


def _start(self: WorkerProcess) -> None:
    # a worker never started looks finished to the strategy, which reuses its slot
    if not (runs_in_process(self._task, self._task_vars, self._loader) and _execute(self)):
        _ORIGINAL_START(self)


def install() -> None:
    WorkerProcess.start = _start
