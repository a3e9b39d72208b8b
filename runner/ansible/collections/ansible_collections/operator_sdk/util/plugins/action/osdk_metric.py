# playbook-operator's operator_sdk.util.osdk_metric, run in the controller: the module only checks its
# arguments and returns the update for the operator, which needs no module process (the module's file keeps
# the documentation and runs wherever this action plugin is not used).
from __future__ import annotations

from ansible_collections.operator_sdk.util.plugins.module_utils.requests import METRIC_ARG_SPEC, metric
from ansible_collections.operator_sdk.util.plugins.plugin_utils.controller import ControllerAction


class ActionModule(ControllerAction):
    ARGUMENT_SPEC = METRIC_ARG_SPEC

    def work(self, module):
        metric(module)
