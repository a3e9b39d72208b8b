# What osdk_metric and requeue_after ask of the operator, checked the same way by their modules and by their
# action plugins (which the runtime runs without a module process): both only validate and return it.
from __future__ import annotations

import re

REQUEUE_ARG_SPEC = {"time": {"type": "str", "required": True}}
DURATION = re.compile(r"^(\d+(\.\d*)?(ns|us|µs|ms|s|m|h))+$")

METRIC_TYPES = ("counter", "gauge", "histogram", "summary")
METRIC_ARG_SPEC = {
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
}
METRIC_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")


def requeue(module):
    """requeue_after's work, for AnsibleModule or the action plugin's stand-in (neither call returns)."""
    period = module.params["time"].strip()
    if not DURATION.match(period):
        module.fail_json(msg="invalid time input %r: expected a duration such as 30s, 5m or 1h30m" % period)
    module.exit_json(changed=False, period=period)


def metric(module):
    """osdk_metric's work, for AnsibleModule or the action plugin's stand-in: the update the operator applies."""
    params = module.params
    if not METRIC_NAME.match(params["name"]):
        module.fail_json(msg="%r is not a valid Prometheus metric name" % params["name"])
    given = [t for t in METRIC_TYPES if params.get(t) is not None]
    if len(given) != 1:
        module.fail_json(msg="a request should contain at least one metric" if not given
                         else "only one metric can be processed at a time")
    kind = given[0]
    spec = {k: v for k, v in params[kind].items() if v is not None}
    if kind == "counter" and spec.get("add") is not None and spec["add"] < 0:
        module.fail_json(msg="counter metrics cannot decrease in value")
    payload = {"name": params["name"], "description": params["description"], kind: spec}
    if params.get("labels"):
        bad = [k for k in params["labels"] if not LABEL_NAME.match(str(k)) or str(k).startswith("__")]
        if bad:
            module.fail_json(msg="invalid label name(s) %s: letters, digits and _, not starting with a digit or __"
                             % bad)
        payload["labels"] = {str(k): "" if v is None else str(v) for k, v in params["labels"].items()}
    module.exit_json(changed=True, osdk_metric=payload)
