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

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.operator_sdk.util.plugins.module_utils.requests import METRIC_ARG_SPEC, metric


def main():
    metric(AnsibleModule(argument_spec=METRIC_ARG_SPEC, supports_check_mode=True))


if __name__ == "__main__":
    main()
