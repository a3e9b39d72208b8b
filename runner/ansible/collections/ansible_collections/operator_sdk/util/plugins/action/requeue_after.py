# playbook-operator's operator_sdk.util.requeue_after, run in the controller: the module only checks the
# duration and returns it for the operator, which needs no module process (the module's file keeps the
# documentation and runs wherever this action plugin is not used).
from __future__ import annotations

from ansible_collections.operator_sdk.util.plugins.module_utils.requests import REQUEUE_ARG_SPEC, requeue
from ansible_collections.operator_sdk.util.plugins.plugin_utils.controller import ControllerAction


class ActionModule(ControllerAction):
    ARGUMENT_SPEC = REQUEUE_ARG_SPEC

    def work(self, module):
        requeue(module)
