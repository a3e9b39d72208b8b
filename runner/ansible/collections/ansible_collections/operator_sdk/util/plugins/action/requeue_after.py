# playbook-operator's operator_sdk.util.requeue_after, run in the controller: the module only checks the
# duration and returns it for the operator, which needs no module process (the module's file keeps the
# documentation and runs wherever this action plugin is not used).
from __future__ import annotations

from ansible.plugins.action import ActionBase
from ansible_collections.operator_sdk.util.plugins.module_utils.requests import (
    REQUEUE_ARG_SPEC,
    InvalidRequest,
    requeue_result,
    validated,
)


class ActionModule(ActionBase):
    _supports_check_mode = True
    _supports_async = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        try:
            result.update(requeue_result(validated(self._task.args, REQUEUE_ARG_SPEC, self._task.action)))
        except InvalidRequest as exc:
            result.update(failed=True, msg=str(exc))
        return result
