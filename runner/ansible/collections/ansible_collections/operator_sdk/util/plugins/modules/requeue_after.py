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

import re

from ansible.module_utils.basic import AnsibleModule

DURATION = re.compile(r"^(\d+(\.\d*)?(ns|us|µs|ms|s|m|h))+$")


def main():
    module = AnsibleModule(argument_spec={"time": {"type": "str", "required": True}}, supports_check_mode=True)
    period = module.params["time"].strip()
    if not DURATION.match(period):
        module.fail_json(msg="invalid time input %r: expected a duration such as 30s, 5m or 1h30m" % period)
    module.exit_json(changed=False, period=period)


if __name__ == "__main__":
    main()
