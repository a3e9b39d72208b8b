#!/usr/bin/python
# playbook-operator's operator_sdk.util.k8s_event
from __future__ import annotations

DOCUMENTATION = r"""
module: k8s_event
short_description: Create a Kubernetes Event, or bump the count of an existing one
description:
  - An Event with this name that has the same reason gets its count incremented and lastTimestamp moved;
    otherwise the Event is (re)written with count 1.
  - C(involvedObject) is completed with the object's uid and resourceVersion when it exists.
options:
  state: {description: Accepted for compatibility., type: str, default: present, choices: [present, absent]}
  name: {description: Event name., type: str, required: true}
  namespace: {description: Event namespace., type: str, required: true}
  merge_type: {description: Accepted for compatibility., type: list, elements: str, choices: [json, merge, strategic-merge]}
  message: {description: Human-readable message., type: str, required: true}
  reason: {description: CamelCase reason., type: str, required: true}
  reportingComponent: {description: Component reporting the event., type: str}
  type: {description: Event type., type: str, choices: [Normal, Warning]}
  appendTimestamp: {description: Append the current Unix time to the name (one Event per call)., type: bool}
  source:
    description: Event source.
    type: dict
    suboptions:
      component: {type: str, required: true}
  involvedObject:
    description: The object the Event is about.
    type: dict
    suboptions:
      apiVersion: {type: str, required: true}
      kind: {type: str, required: true}
      name: {type: str, required: true}
      namespace: {type: str, required: true}
author: playbook-operator
"""

EXAMPLES = r"""
- operator_sdk.util.k8s_event:
    name: "{{ ansible_operator_meta.name }}-backup"
    namespace: "{{ ansible_operator_meta.namespace }}"
    reason: BackupCompleted
    message: "Backup {{ backup_name }} completed"
    type: Normal
    involvedObject:
      apiVersion: sampledb.example.com/v1alpha1
      kind: SampleDB
      name: "{{ ansible_operator_meta.name }}"
      namespace: "{{ ansible_operator_meta.namespace }}"
"""

RETURN = r"""
result:
  description: The Event as stored.
  type: dict
  returned: success
"""

import datetime
import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.operator_sdk.util.plugins.module_utils.osdk_common import (
    AUTH_ARG_SPEC,
    ApiError,
    api_client,
    discover,
    object_path,
    request,
)


def main():
    spec = dict(AUTH_ARG_SPEC)
    spec.update({
        "state": {"type": "str", "default": "present", "choices": ["present", "absent"]},
        "name": {"type": "str", "required": True},
        "namespace": {"type": "str", "required": True},
        "merge_type": {"type": "list", "elements": "str", "choices": ["json", "merge", "strategic-merge"]},
        "message": {"type": "str", "required": True},
        "reason": {"type": "str", "required": True},
        "reportingComponent": {"type": "str"},
        "type": {"type": "str", "choices": ["Normal", "Warning"]},
        "appendTimestamp": {"type": "bool"},
        "source": {"type": "dict", "options": {"component": {"type": "str", "required": True}}},
        "involvedObject": {"type": "dict", "options": {
            "apiVersion": {"type": "str", "required": True}, "kind": {"type": "str", "required": True},
            "name": {"type": "str", "required": True}, "namespace": {"type": "str", "required": True}}},
    })
    module = AnsibleModule(argument_spec=spec, supports_check_mode=True)
    p = module.params
    api = api_client(module)
    name, ns = p["name"], p["namespace"]
    if p["appendTimestamp"]:
        name = "%s.%d" % (name, time.time_ns())  # a valid name, unlike upstream's str(datetime)
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    path = "/api/v1/namespaces/%s/events" % ns

    involved = dict(p["involvedObject"]) if p["involvedObject"] else None
    if involved:
        try:
            found = discover(api, involved["apiVersion"], involved["kind"])
            if found:
                plural, namespaced, _, base = found
                obj = request(api, "GET", object_path(base, plural, namespaced, involved["namespace"], involved["name"]))
                involved["uid"] = obj["metadata"]["uid"]
                involved["resourceVersion"] = obj["metadata"]["resourceVersion"]
        except ApiError as exc:
            if exc.status != 404:
                module.fail_json(msg="Unable to look up the involved object: %s" % exc.reason)

    prior = None
    try:
        prior = request(api, "GET", "%s/%s" % (path, name))
    except ApiError as exc:
        if exc.status != 404:
            module.fail_json(msg="Unable to read event: %s" % exc.reason)
    count, first = 1, stamp
    if prior and prior.get("reason") == p["reason"]:
        count = int(prior.get("count") or 1) + 1
        first = prior.get("firstTimestamp") or stamp
    event = {
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": name, "namespace": ns},
        "message": p["message"], "reason": p["reason"], "type": p["type"] or "Normal",
        "count": count, "firstTimestamp": first, "lastTimestamp": stamp,
        "source": p["source"] or {"component": p["reportingComponent"] or "playbook-operator"},
        "reportingComponent": p["reportingComponent"] or "",
    }
    if involved:
        event["involvedObject"] = involved
    if module.check_mode:
        module.exit_json(changed=True, result=event)
    try:
        if prior:
            result = request(api, "PATCH", "%s/%s" % (path, name), event, "application/merge-patch+json")
        else:
            result = request(api, "POST", path, event)
    except ApiError as exc:
        module.fail_json(msg="Unable to create event: %s" % exc.body)
    module.exit_json(changed=True, result=result)


if __name__ == "__main__":
    main()
