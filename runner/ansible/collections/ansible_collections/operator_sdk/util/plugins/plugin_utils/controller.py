# The operator_sdk.util action plugins: a module's work done in the controller, without a module process (the
# runtime runs them in the run's own process). The arguments are checked as AnsibleModule checks them, and the
# result is the module's, with the values of no_log arguments masked as AnsibleModule masks them.
from __future__ import annotations

import json

from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.module_utils.common.parameters import remove_values
from ansible.module_utils.errors import UnsupportedError
from ansible.plugins.action import ActionBase


class _Answer(Exception):
    def __init__(self, result):
        super().__init__()
        self.result = result


class ModuleInController:
    """What a module's work asks of AnsibleModule: ``params``, ``check_mode``, and ``exit_json`` and ``fail_json``,
    which end the work with the task's result."""

    def __init__(self, params, check_mode=False):
        self.params, self.check_mode = params, check_mode

    def exit_json(self, **result):
        raise _Answer(result)

    def fail_json(self, msg, **result):
        raise _Answer(dict(result, failed=True, msg=msg))


def answer(work, args, argument_spec, name, check_mode=False):
    """The result of ``work(module)`` for these task arguments, or the failure AnsibleModule would report for
    them (its arguments arrive as JSON, then are checked against ``argument_spec``)."""
    checked = ArgumentSpecValidator(argument_spec).validate(json.loads(json.dumps(args)))
    no_log_values = checked._no_log_values
    if checked.error_messages:
        msg = checked.errors.msg
        if isinstance(checked.errors[0], UnsupportedError):
            msg = "Unsupported parameters for (%s) module: %s" % (name, msg)
        return remove_values({"failed": True, "msg": msg}, no_log_values)
    try:
        work(ModuleInController(checked.validated_parameters, check_mode))
        result = {"changed": False}
    except _Answer as given:
        result = given.result
    return remove_values(result, no_log_values)


class ControllerAction(ActionBase):
    """An operator_sdk.util module's work, done here: ``ARGUMENT_SPEC`` and ``work(module)`` as the module has them."""

    ARGUMENT_SPEC: dict = {}
    _supports_check_mode = True
    _supports_async = False

    def work(self, module):
        raise NotImplementedError

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        result.update(answer(self.work, self._task.args, self.ARGUMENT_SPEC, self._task.action,
                             check_mode=bool(self._task.check_mode)))
        return result
