"""Provisioning decisions: whether the servers can take spec.resources, where the servers may run (spec.affinity), and
when a StatefulSet must be made again because a field the API server never changes differs."""

from __future__ import annotations

import re

_SUFFIXES = {"": 1, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18,
             "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}


def _quantity(value) -> float | None:
    """A Kubernetes quantity ('500m', '2', '1Gi', '1e3') as a number; None when it is not one."""
    match = re.fullmatch(r"\+?([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:([eE][-+]?[0-9]+)|(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?)",
                         str(value).strip())
    if not match:
        return None
    number = float(match.group(1))
    if match.group(2):
        return number * 10 ** int(match.group(2)[1:])
    return number * _SUFFIXES[match.group(3) or ""]


def sampledb_resources_problems(resources) -> list[str]:
    """What is wrong with spec.resources for the servers' containers, one message per field ([] when nothing): a
    value that is not a quantity, a request above its limit."""
    problems = []
    resources = resources or {}
    for kind in ("requests", "limits"):
        for name, value in (resources.get(kind) or {}).items():
            if _quantity(value) is None:
                problems.append(f"spec.resources.{kind}.{name}: {value!r} is not a quantity (such as 500m, 2 or 1Gi)")
    for name, limit in (resources.get("limits") or {}).items():
        request = (resources.get("requests") or {}).get(name)
        if request is not None and None not in (_quantity(request), _quantity(limit)) and \
                _quantity(request) > _quantity(limit):
            problems.append(f"spec.resources.requests.{name} {request} is more than spec.resources.limits.{name} {limit}")
    return problems


def _template_fields(template: dict) -> dict:
    meta, spec = template.get("metadata") or {}, template.get("spec") or {}
    storage = str((((spec.get("resources") or {}).get("requests") or {}).get("storage")) or "")
    return {"name": meta.get("name"), "labels": meta.get("labels") or {},
            "accessModes": sorted(spec.get("accessModes") or []), "storageClassName": spec.get("storageClassName"),
            "storage": _quantity(storage) if storage else None}


def sampledb_statefulset_immutable_changes(current, desired) -> list[str]:
    """The fields of StatefulSet ``desired`` that the API server would refuse to change on ``current`` (its volume
    claim templates, pod management policy, selector, service name); [] when there is no ``current`` or none
    differs."""
    if not current or not desired:
        return []
    now, want = current.get("spec") or {}, desired.get("spec") or {}
    changed = []
    if (now.get("podManagementPolicy") or "OrderedReady") != (want.get("podManagementPolicy") or "OrderedReady"):
        changed.append("spec.podManagementPolicy")
    if now.get("serviceName") != want.get("serviceName"):
        changed.append("spec.serviceName")
    if (now.get("selector") or {}) != (want.get("selector") or {}):
        changed.append("spec.selector")
    if [_template_fields(t) for t in now.get("volumeClaimTemplates") or []] != \
            [_template_fields(t) for t in want.get("volumeClaimTemplates") or []]:
        changed.append("spec.volumeClaimTemplates")
    return changed


def sampledb_scheduling(affinity, server_labels, default_topology_key="kubernetes.io/hostname",
                        preferred_weight=100) -> dict:
    """The server pods' scheduling fields from spec.affinity. By default the servers are spread over the values of
    topologyKey (one per node): each prefers a node without another server of its database (pod anti-affinity,
    CloudNativePG's default) and the scheduler keeps them even (a topology spread it may break when nodes are
    short). ``required`` never puts two on one node: a server stays Pending instead. nodeSelector and tolerations
    are passed on as given."""
    affinity = affinity or {}
    key = affinity.get("topologyKey") or default_topology_key
    selector = {"matchLabels": dict(server_labels)}
    out: dict = {}
    if affinity.get("enablePodAntiAffinity", True):
        term = {"labelSelector": selector, "topologyKey": key}
        if affinity.get("podAntiAffinityType") == "required":
            out["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}
        else:
            out["affinity"] = {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": int(preferred_weight), "podAffinityTerm": term}]}}
            out["topologySpreadConstraints"] = [{"maxSkew": 1, "topologyKey": key,
                                                 "whenUnsatisfiable": "ScheduleAnyway", "labelSelector": selector}]
    for field in ("nodeSelector", "tolerations"):
        if affinity.get(field):
            out[field] = affinity[field]
    return out


class FilterModule:
    def filters(self):
        return {"sampledb_resources_problems": sampledb_resources_problems,
                "sampledb_scheduling": sampledb_scheduling,
                "sampledb_statefulset_immutable_changes": sampledb_statefulset_immutable_changes}
