"""Which objects a run's object owns: those its runs create, and nothing else (the Go ansible-operator's rule).

An object a run creates (a POST, or a server-side apply of an object that does not exist yet) is linked to the
run's object: by an ownerReference (controller, blockOwnerDeletion) when garbage collection can follow one (the
same namespace, or a cluster-scoped owner), else by the annotations ``operator-sdk/primary-resource`` and
``-type``. An object that carries someone else's ownerReference is left as the role wrote it. An object the
run only changes (a merge, strategic or JSON patch; an apply or a PUT of an existing object) keeps the owners it
has: a link is never added to it. An apply or a PUT replaces what its manager wrote before, so when the object
is already linked to this owner (this owner's runs created it), the link is written again; left out, the
apply would take it away.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass
from typing import Any

import yaml

from .config import GVK

PRIMARY_RESOURCE = "operator-sdk/primary-resource"
PRIMARY_RESOURCE_TYPE = "operator-sdk/primary-resource-type"
APPLY_PATCH = "application/apply-patch+yaml"


@dataclass(frozen=True)
class Owner:
    api_version: str
    kind: str
    name: str
    namespace: str  # "" when cluster-scoped
    uid: str
    gvk: GVK
    inject: bool = True  # False for finalizer runs: what they create must outlive the owner

    @property
    def reference(self) -> dict[str, Any]:
        return {"apiVersion": self.api_version, "kind": self.kind, "name": self.name, "uid": self.uid,
                "controller": True, "blockOwnerDeletion": True}

    @property
    def annotations(self) -> dict[str, str]:
        group = f".{self.gvk.group}" if self.gvk.group else ""
        return {PRIMARY_RESOURCE: f"{self.namespace}/{self.name}", PRIMARY_RESOURCE_TYPE: f"{self.kind}{group}"}


@dataclass(frozen=True)
class Target:
    """The kind a request is about, from discovery."""

    gvk: GVK
    plural: str
    namespaced: bool


class Link(enum.Enum):
    REFERENCE = "an ownerReference"
    ANNOTATIONS = "the primary-resource annotations"


def link_for(owner: Owner, target: Target, namespace: str) -> Link:
    """How ``owner`` links an object of ``target``'s kind in ``namespace``: garbage collection follows an
    ownerReference within a namespace, or from a cluster-scoped owner, and nothing else."""
    if not owner.namespace or (target.namespaced and namespace == owner.namespace):
        return Link.REFERENCE
    return Link.ANNOTATIONS


def linked(meta: dict[str, Any], owner: Owner) -> Link | None:
    """How an object (its metadata) is linked to ``owner`` already, if it is."""
    if any(isinstance(r, dict) and r.get("uid") == owner.uid for r in meta.get("ownerReferences") or []):
        return Link.REFERENCE
    annotations = meta.get("annotations") or {}
    if all(annotations.get(k) == v for k, v in owner.annotations.items()):
        return Link.ANNOTATIONS
    return None


def owned_by_another(meta: dict[str, Any], owner: Owner) -> bool:
    return any(isinstance(r, dict) and r.get("uid") != owner.uid for r in meta.get("ownerReferences") or [])


def needs_live_object(method: str, content_type: str) -> bool:
    """Whether the decision needs the object as it is: an apply creates it or not; a PUT replaces it."""
    return method == "PUT" or (method == "PATCH" and content_type == APPLY_PATCH)


def decide(method: str, content_type: str, written: dict[str, Any], live: dict[str, Any] | None, owner: Owner,
           target: Target, namespace: str) -> Link | None:
    """The link this write must carry, if any. ``written`` is the body's metadata; ``live`` the object's
    metadata as it is (None: it does not exist; only read for ``needs_live_object`` writes)."""
    creates = method == "POST" or (method == "PATCH" and content_type == APPLY_PATCH and live is None)
    if creates:
        if owned_by_another(written, owner):
            return None  # the role chose its owner
        return link_for(owner, target, namespace)
    if needs_live_object(method, content_type) and live is not None:
        return linked(live, owner)  # written again, or the apply or PUT would drop it
    return None


def parse_body(body: bytes) -> dict[str, Any] | None:
    """A write's object (JSON, or YAML as an apply may send it)."""
    try:
        obj = json.loads(body)
    except ValueError:
        try:
            obj = yaml.safe_load(body)
        except yaml.YAMLError:
            return None
    if not isinstance(obj, dict) or not isinstance(obj.setdefault("metadata", {}), dict):
        return None
    return obj


def with_link(obj: dict[str, Any], owner: Owner, link: Link, live: dict[str, Any] | None = None) -> dict[str, Any]:
    """``obj`` with ``link`` added; a reference the live object has already is written as it is."""
    meta = obj["metadata"]
    if link is Link.REFERENCE:
        refs = [r for r in meta.get("ownerReferences") or [] if isinstance(r, dict)]
        if not any(r.get("uid") == owner.uid for r in refs):
            kept = [r for r in (live or {}).get("ownerReferences") or [] if r.get("uid") == owner.uid]
            meta["ownerReferences"] = [*refs, kept[0] if kept else owner.reference]
    else:
        meta["annotations"] = {**(meta.get("annotations") or {}), **owner.annotations}
    return obj
