# playbook-operator's operator_sdk.util.k8s_status, run in the controller: the same work as the module (the
# status merged into the object's through the API), without a module process of its own. The module's file
# keeps the documentation and runs wherever this action plugin is not used.
from __future__ import annotations

from ansible_collections.operator_sdk.util.plugins.module_utils.status import STATUS_ARG_SPEC, report
from ansible_collections.operator_sdk.util.plugins.plugin_utils.controller import ControllerAction


class ActionModule(ControllerAction):
    ARGUMENT_SPEC = STATUS_ARG_SPEC

    def work(self, module):
        report(module)
