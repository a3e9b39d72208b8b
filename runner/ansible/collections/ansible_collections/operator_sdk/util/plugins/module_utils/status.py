# operator_sdk.util.k8s_status's work, shared by its module and its action plugin (which the runtime runs in the
# controller, without a module process): merge the asked-for status and conditions into the object's.
from __future__ import annotations

import copy
import datetime
import re

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


STATUS_ARG_SPEC = dict(AUTH_ARG_SPEC)
STATUS_ARG_SPEC.update(NAME_ARG_SPEC)
STATUS_ARG_SPEC.update({
    "status": {"type": "dict"},
    "conditions": {"type": "list", "elements": "dict", "options": {
        "type": {"type": "str", "required": True},
        "status": {"type": "str", "required": True, "choices": ["True", "False", "Unknown"]},
        "reason": {"type": "str"}, "message": {"type": "str"},
        "lastHeartbeatTime": {"type": "str"}, "lastTransitionTime": {"type": "str"}}},
    "replace": {"type": "bool", "default": False, "aliases": ["force"]},
    "replace_lists": {"type": "bool", "default": False},
})


def report(module):
    """Merges the asked-for status into the object's. ``module``: an AnsibleModule, or anything with its
    ``params``, ``check_mode``, ``exit_json`` and ``fail_json`` (neither returns)."""
    status = _asked(module)
    api = api_client(module)
    try:
        _merge(module, api, status)
    finally:  # no connection outlives the call (in the controller, a later fork must not share it)
        api.rest_client.pool_manager.clear()
        api.close()


def _asked(module):
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
    return status


def _merge(module, api, status):
    p = module.params
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

