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

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.operator_sdk.util.plugins.module_utils.status import STATUS_ARG_SPEC, report


def main():
    report(AnsibleModule(argument_spec=STATUS_ARG_SPEC, supports_check_mode=True))


if __name__ == "__main__":
    main()
