#!/usr/bin/python
# playbook-operator's operator_sdk.util.osdk_metric
from __future__ import annotations

DOCUMENTATION = r"""
module: osdk_metric
short_description: Record a Prometheus metric on the operator's /metrics endpoint
description:
  - Counters, gauges, histograms and summaries, created on first use with this name and description.
  - The metric reaches the operator through this task's result (the runtime reads it from the run's
    events), so no port needs to be open between the run and the operator. C(address) is accepted for
    compatibility with the Go ansible-operator and otherwise unused.
options:
  name: {description: The metric name., type: str, required: true}
  description: {description: The metric help text., type: str, required: true}
  address: {description: Unused (compatibility)., type: str, default: "http://localhost:5050/metrics"}
  labels:
    description:
      - Label names and values of the series to change (an addition to the Go module, which has none).
      - Every call for a metric names the same labels. The series a resource's runs record are removed when
        the resource is deleted.
    type: dict
  counter:
    description: Increment (C(increment: true)) or add to (C(add)) a counter.
    type: dict
    suboptions:
      increment: {type: bool}
      add: {type: float}
  gauge:
    description: Change a gauge.
    type: dict
    suboptions:
      set: {type: float}
      increment: {type: bool}
      decrement: {type: bool}
      add: {type: float}
      subtract: {type: float}
      set_to_current_time: {type: bool}
  histogram:
    description: Observe a value.
    type: dict
    suboptions:
      observe: {type: float}
  summary:
    description: Observe a value.
    type: dict
    suboptions:
      observe: {type: float}
author: playbook-operator
"""

EXAMPLES = r"""
- operator_sdk.util.osdk_metric:
    name: sampledb_failovers_total
    description: Failovers of a database
    labels: {namespace: "{{ ansible_operator_meta.namespace }}", sampledb: "{{ ansible_operator_meta.name }}"}
    counter:
      increment: true
- operator_sdk.util.osdk_metric:
    name: sampledb_backups_total
    description: Backups taken
    counter:
      increment: true
"""

RETURN = r"""
osdk_metric:
  description: The metric update the operator applies.
  type: dict
  returned: success
"""

import re

from ansible.module_utils.basic import AnsibleModule

TYPES = ("counter", "gauge", "histogram", "summary")
NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
LABEL = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")


def main():
    module = AnsibleModule(
        argument_spec={
            "name": {"type": "str", "required": True},
            "description": {"type": "str", "required": True},
            "address": {"type": "str", "default": "http://localhost:5050/metrics"},
            "labels": {"type": "dict"},
            "counter": {"type": "dict", "options": {"increment": {"type": "bool"}, "add": {"type": "float"}}},
            "gauge": {"type": "dict", "options": {
                "set": {"type": "float"}, "increment": {"type": "bool"}, "decrement": {"type": "bool"},
                "add": {"type": "float"}, "subtract": {"type": "float"}, "set_to_current_time": {"type": "bool"}}},
            "histogram": {"type": "dict", "options": {"observe": {"type": "float"}}},
            "summary": {"type": "dict", "options": {"observe": {"type": "float"}}},
        },
        supports_check_mode=True,
    )
    p = module.params
    if not NAME.match(p["name"]):
        module.fail_json(msg="%r is not a valid Prometheus metric name" % p["name"])
    given = [t for t in TYPES if p.get(t) is not None]
    if len(given) != 1:
        module.fail_json(msg="a request should contain at least one metric" if not given
                         else "only one metric can be processed at a time")
    kind = given[0]
    spec = {k: v for k, v in p[kind].items() if v is not None}
    if kind == "counter" and spec.get("add") is not None and spec["add"] < 0:
        module.fail_json(msg="counter metrics cannot decrease in value")
    payload = {"name": p["name"], "description": p["description"], kind: spec}
    if p["labels"]:
        bad = [k for k in p["labels"] if not LABEL.match(str(k)) or str(k).startswith("__")]
        if bad:
            module.fail_json(msg="invalid label name(s) %s: letters, digits and _, not starting with a digit or __" % bad)
        payload["labels"] = {str(k): "" if v is None else str(v) for k, v in p["labels"].items()}
    module.exit_json(changed=True, osdk_metric=payload)


if __name__ == "__main__":
    main()
