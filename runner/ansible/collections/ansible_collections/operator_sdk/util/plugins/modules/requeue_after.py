#!/usr/bin/python
# playbook-operator's operator_sdk.util.requeue_after
from __future__ import annotations

DOCUMENTATION = r"""
module: requeue_after
short_description: Ask the operator to run this role again after a delay
description:
  - The operator reads C(period) from this task's result and schedules the next reconcile of the
    current object after it, instead of its reconcile period (and instead of the failure backoff).
  - Unlike the Go ansible-operator, the rest of the run (status update, finalizer removal) still happens.
options:
  time:
    description: A duration such as C(30s), C(5m), C(1h30m) or C(500ms).
    type: str
    required: true
author: playbook-operator
"""

EXAMPLES = r"""
- operator_sdk.util.requeue_after:
    time: 30s
"""

RETURN = r"""
period:
  description: The delay, as given.
  type: str
  returned: always
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.operator_sdk.util.plugins.module_utils.requests import REQUEUE_ARG_SPEC, requeue


def main():
    requeue(AnsibleModule(argument_spec=REQUEUE_ARG_SPEC, supports_check_mode=True))


if __name__ == "__main__":
    main()
