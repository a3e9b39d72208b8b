#!/usr/bin/python
# playbook-operator's operator_sdk.util.k8s_status
from __future__ import annotations

DOCUMENTATION = r"""
module: k8s_status
short_description: Merge custom status fields and conditions into a resource's status subresource
description:
  - Keys under C(status) are merged into the object's status; C(conditions) are merged by C(type)
    (a condition of a new type is added, one of an existing type is replaced when anything but its
    lastTransitionTime changed; other conditions, including the operator's own, are kept).
  - lastTransitionTime is kept while a condition's status stays the same, and set to now when it changes
    (unless given).
  - Conflict-safe: the write carries the resourceVersion it was computed from and is recomputed on a
    conflict, so concurrent writers (such as the operator's own condition updates) are never lost.
  - Reports C(changed=false) and writes nothing when the status already contains what is asked.
options:
  api_version: {description: API version of the object., type: str, default: v1, aliases: [api, version]}
  kind: {description: Kind of the object (kind, plural, singular or short name)., type: str, required: true}
  name: {description: Name of the object., type: str, required: true}
  namespace: {description: Namespace of the object (defaults to the CR's namespace in operator runs)., type: str}
  status: {description: Status fields to set., type: dict}
  conditions:
    description: Conditions to merge by type.
    type: list
    elements: dict
    suboptions:
      type: {type: str, required: true}
      status: {type: str, required: true, choices: ["True", "False", "Unknown"]}
      reason: {type: str}
      message: {type: str}
      lastHeartbeatTime: {type: str}
      lastTransitionTime: {type: str}
  replace:
    description: Replace the whole status with C(status) (PUT) instead of merging.
    type: bool
    default: false
    aliases: [force]
  replace_lists:
    description: Lists other than conditions count as changed unless equal (not just contained).
    type: bool
    default: false
extends_documentation_fragment: []
author: playbook-operator
"""

EXAMPLES = r"""
- operator_sdk.util.k8s_status:
    api_version: cache.example.com/v1alpha1
    kind: Memcached
    name: "{{ ansible_operator_meta.name }}"
    namespace: "{{ ansible_operator_meta.namespace }}"
    status:
      nodes: "{{ pods | map(attribute='metadata.name') | list }}"
    conditions:
      - type: Ready
        status: "True"
        reason: AllPodsReady
        message: All pods are ready
"""

RETURN = r"""
result:
  description: The object after the update.
  type: dict
  returned: success
"""

import copy
import datetime
import re

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.operator_sdk.util.plugins.module_utils.osdk_common import (
    AUTH_ARG_SPEC,
    NAME_ARG_SPEC,
    ApiError,
    api_client,
    discover,
    object_path,
    request,
)

VALID_KEYS = ["type", "status", "reason", "message", "lastHeartbeatTime", "lastTransitionTime"]
CAMEL_CASE = re.compile(r"^(?:[A-Z]*[a-z]*)+$")
RFC3339 = re.compile(r"^\d{4}-\d\d-\d\d[T ]\d\d:\d\d(:\d\d)?(\.\d+)?(([+-]\d\d:\d\d)|Z)$")
CONFLICT_RETRIES = 8


def now():
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def validate_conditions(conditions):
    if not isinstance(conditions, list):
        return "`conditions` must be a list of objects"
    for cond in conditions:
        if not isinstance(cond, dict):
            return "`conditions` must be a list of objects"
        for key in list(cond):
            if cond[key] is None:
                del cond[key]
            elif key not in VALID_KEYS:
                return f"{key} is not a valid field for a condition, accepted fields are {VALID_KEYS}"
        for key in ("type", "status"):
            if not cond.get(key):
                return f"Condition `{key}` must be set"
        if isinstance(cond["status"], bool):
            cond["status"] = str(cond["status"])
        if cond["status"] not in ("True", "False", "Unknown"):
            return "Condition 'status' must be one of [\"True\", \"False\", \"Unknown\"], not {0}".format(cond["status"])
        if cond.get("reason") and not CAMEL_CASE.match(cond["reason"]):
            return "Condition 'reason' must be a single, CamelCase word"
        for key in ("lastHeartbeatTime", "lastTransitionTime"):
            if cond.get(key) and not RFC3339.match(cond[key]):
                return f"'{key}' must be an RFC3339 compliant datetime string"
    return None


def transitioned(old, new):
    return any(k != "lastTransitionTime" and v != old.get(k) for k, v in new.items())


def merge_conditions(old, new):
    merged = copy.deepcopy(old)
    for cond in new:
        cond = dict(cond)
        idx = next((i for i, c in enumerate(merged) if isinstance(c, dict) and c.get("type") == cond["type"]), None)
        if idx is None:
            cond.setdefault("lastTransitionTime", now())
            merged.append(cond)
        elif transitioned(merged[idx], cond):
            if "lastTransitionTime" not in cond:
                same = merged[idx].get("status") == cond["status"] and merged[idx].get("lastTransitionTime")
                cond["lastTransitionTime"] = merged[idx]["lastTransitionTime"] if same else now()
            merged[idx] = cond
    return merged


def contains(old, new, replace_lists, key=None):
    """Whether ``old`` already holds everything ``new`` asks for."""
    if isinstance(new, dict):
        # a key set to null removes it (merge patch): already absent means nothing to do
        return isinstance(old, dict) and all(
            (k in old and contains(old[k], v, replace_lists, k)) or (v is None and old.get(k) is None)
            for k, v in new.items())
    if isinstance(new, list):
        if not isinstance(old, list):
            return False
        if replace_lists and key != "conditions":
            return old == new
        return all(item in old for item in new)
    return old == new


def main():
    spec = dict(AUTH_ARG_SPEC)
    spec.update(NAME_ARG_SPEC)
    spec.update({
        "status": {"type": "dict"},
        "conditions": {"type": "list", "elements": "dict", "options": {
            "type": {"type": "str", "required": True},
            "status": {"type": "str", "required": True, "choices": ["True", "False", "Unknown"]},
            "reason": {"type": "str"}, "message": {"type": "str"},
            "lastHeartbeatTime": {"type": "str"}, "lastTransitionTime": {"type": "str"}}},
        "replace": {"type": "bool", "default": False, "aliases": ["force"]},
        "replace_lists": {"type": "bool", "default": False},
    })
    module = AnsibleModule(argument_spec=spec, supports_check_mode=True)
    p = module.params
    status = copy.deepcopy(p["status"] or {})
    conditions = copy.deepcopy(p["conditions"]) if p["conditions"] is not None else None
    if conditions is not None:
        if "conditions" in status:
            module.fail_json(msg="You cannot specify conditions in both the 'status' and 'conditions' parameters")
        error = validate_conditions(conditions)
        if error:
            module.fail_json(msg="The specified conditions failed to validate", error=error)
        status["conditions"] = conditions
    elif isinstance(status.get("conditions"), list):
        error = validate_conditions(status["conditions"])
        if error:
            module.fail_json(msg="The specified conditions failed to validate", error=error)

    api = api_client(module)
    try:
        found = discover(api, p["api_version"], p["kind"])
    except ApiError as exc:
        module.fail_json(msg="Failed to look up %s %s: %s" % (p["api_version"], p["kind"], exc.reason),
                         error={"status": exc.status, "reason": exc.reason, "body": exc.body})
    if found is None:
        module.fail_json(msg="Failed to find exact match for {0}.{1} by [kind, name, singularName, shortNames]".format(
            p["api_version"], p["kind"]))
    plural, namespaced, has_status, base = found
    if not has_status:
        module.fail_json(msg="Resource {0}.{1} does not support the status subresource".format(p["api_version"], p["kind"]))
    path = object_path(base, plural, namespaced, p["namespace"], p["name"])

    for _ in range(CONFLICT_RETRIES):
        try:
            instance = request(api, "GET", path)
        except ApiError as exc:
            module.fail_json(msg="Failed to retrieve requested object",
                             error={"status": exc.status, "reason": exc.reason, "body": exc.body})
        old = instance.get("status") or {}
        if p["replace"]:
            if old == status:
                module.exit_json(changed=False, result=instance)
            new = status
            if isinstance(new.get("conditions"), list):
                new["conditions"] = merge_conditions([], new["conditions"])
            body, method, ctype = dict(instance, status=new), "PUT", "application/json"
        else:
            if not status:
                module.exit_json(changed=False, result=instance)
            new = dict(status)
            if isinstance(status.get("conditions"), list):
                new["conditions"] = merge_conditions(
                    [c for c in old.get("conditions") or [] if isinstance(c, dict)], status["conditions"])
            if contains(old, new, p["replace_lists"]):
                module.exit_json(changed=False, result=instance)
            body = {"metadata": {"resourceVersion": instance["metadata"]["resourceVersion"]}, "status": new}
            method, ctype = "PATCH", "application/merge-patch+json"
        if module.check_mode:
            module.exit_json(changed=True, result=dict(instance, status=dict(old, **new)))
        try:
            result = request(api, method, path + "/status", body, ctype)
        except ApiError as exc:
            if exc.status == 409:
                continue
            module.fail_json(msg="Failed to replace status: %s" % exc.reason,
                             error={"status": exc.status, "reason": exc.reason, "body": exc.body})
        module.exit_json(changed=True, result=result)
    module.fail_json(msg="Failed to replace status: the object kept changing (%d conflicts)" % CONFLICT_RETRIES)


if __name__ == "__main__":
    main()
