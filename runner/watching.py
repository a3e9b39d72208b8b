"""The kinds of watches.yaml, each listed and watched by the runtime's own reflectors (``reflector.py``) into
an informer-style cache; every change the operator should act on queues the object's key.

What counts as a change (the ansible-operator's predicates, minus its feedback loops): a new object (also one
created again under a name seen before: objects are told apart by UID), a change of anything outside metadata
and status (the spec), a deletion request, a deletion (also one a new list finds, after a watch could not be
resumed), and, with ``watchAnnotationsChanges``, an annotation change. Status and other metadata changes,
including the operator's own writes, do not trigger runs. ``selector`` is applied by the API server (label
selector on the list and watch) and checked again here.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from . import metrics
from .apisession import ApiSession
from .config import RECORDED_DEPENDENTS_ANNOTATION, LabelSelector, Watch
from .kube import ApiError, Kube, NotFound, Resource
from .queue import CHANGE, Key, WorkQueue
from .reflector import Reflector

log = logging.getLogger(__name__)


def selector_string(sel: LabelSelector) -> str:
    parts = [f"{k}={v}" for k, v in sorted(sel.match_labels.items())]
    for key, op, values in sel.match_expressions:
        if op == "In":
            parts.append(f"{key} in ({','.join(values)})")
        elif op == "NotIn":
            parts.append(f"{key} notin ({','.join(values)})")
        elif op == "Exists":
            parts.append(key)
        elif op == "DoesNotExist":
            parts.append(f"!{key}")
    return ",".join(parts)


def key_of(obj: dict[str, Any]) -> Key:
    meta = obj.get("metadata") or {}
    return meta.get("namespace") or "", meta.get("name", "")


def uid_of(obj: dict[str, Any] | None) -> str | None:
    return ((obj or {}).get("metadata") or {}).get("uid")


def _content(obj: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in obj.items() if k not in ("metadata", "status")}


def _annotations(meta: dict[str, Any]) -> dict[str, str]:
    """The annotations a user sets: the runtime's own bookkeeping on the object is no change of it."""
    return {k: v for k, v in (meta.get("annotations") or {}).items() if k != RECORDED_DEPENDENTS_ANNOTATION}


class ObjectStore:
    """The newest copy of each watched object of one kind (only those matching the selector).

    Kept as compact JSON, not as dicts, so that a thousand idle objects cost little; each read is a fresh copy,
    so no caller changes another's. Fed by one reflector per watched namespace (``scope``).
    """

    def __init__(self, watch: Watch, queue: WorkQueue) -> None:
        self.watch = watch
        self.queue = queue
        self._objects: dict[Key, bytes] = {}

    @staticmethod
    def _pack(obj: dict[str, Any]) -> bytes:
        return json.dumps(obj, separators=(",", ":")).encode()

    def latest(self, key: Key) -> dict[str, Any] | None:
        packed = self._objects.get(key)
        return json.loads(packed) if packed is not None else None

    def observed(self, key: Key, obj: dict[str, Any]) -> None:
        """The reconciler read or wrote this version of the same object itself; newer watch events still win."""
        current = self.latest(key)
        if current is None or uid_of(current) != uid_of(obj):
            return
        try:
            if int(obj["metadata"]["resourceVersion"]) < int(current["metadata"]["resourceVersion"]):
                return
        except (KeyError, ValueError):
            pass
        self._objects[key] = self._pack(obj)

    def scope(self, namespace: str | None) -> StoreScope:
        return StoreScope(self, namespace)

    def keys(self, namespace: str | None) -> set[Key]:
        return {k for k in self._objects if namespace is None or k[0] == namespace}

    def put(self, obj: dict[str, Any]) -> None:
        """An object as listed or watched: recorded, and queued if the operator should act on it."""
        key, meta = key_of(obj), obj.get("metadata") or {}
        if not self.watch.selector.matches(meta.get("labels")):
            if key in self._objects:
                self.remove(key)
            return
        prev = self.latest(key)
        self._objects[key] = self._pack(obj)
        owner = metrics.owner_of(self.watch.gvk, key)
        if prev is not None and uid_of(prev) != uid_of(obj):
            metrics.forget_resource(owner)  # another object of the same name: the old one's series are history
        metrics.observe_resource(owner, obj)
        if self._changed(prev, obj):
            self.queue.add(key, CHANGE)

    def _changed(self, prev: dict[str, Any] | None, obj: dict[str, Any]) -> bool:
        if prev is None or uid_of(prev) != uid_of(obj):
            return True
        meta, pmeta = obj.get("metadata") or {}, prev.get("metadata") or {}
        if meta.get("deletionTimestamp") and not pmeta.get("deletionTimestamp"):
            return True
        if _content(obj) != _content(prev):
            return True
        if "generation" not in meta and meta.get("resourceVersion") != pmeta.get("resourceVersion") \
                and obj.get("status") == prev.get("status"):
            return True  # kinds without generation: any update but our status writes
        return self.watch.watch_annotations_changes and _annotations(meta) != _annotations(pmeta)

    def remove(self, key: Key) -> None:
        """The object is gone. One last pass finds it gone and removes its runner directories; a run in
        progress finds it gone when it ends."""
        if self._objects.pop(key, None) is None:
            return
        metrics.forget_resource(metrics.owner_of(self.watch.gvk, key))
        self.queue.forget(key)
        self.queue.add(key, CHANGE)


@dataclass
class StoreScope:
    """One reflector's part of a store (a namespace, or all of it): what a new list no longer shows is gone."""

    store: ObjectStore
    namespace: str | None
    _listed: set[Key] = field(default_factory=set)

    def relist_begin(self) -> None:
        self._listed = set()

    def listed(self, obj: dict[str, Any]) -> None:
        self._listed.add(key_of(obj))
        self.store.put(obj)

    def relist_end(self) -> None:
        for key in self.store.keys(self.namespace) - self._listed:
            log.info("%s %s/%s was deleted while not watched", self.store.watch.gvk.kind, *key)
            self.store.remove(key)
        self._listed = set()

    def event(self, etype: str, obj: dict[str, Any]) -> None:
        if etype == "DELETED":
            self.store.remove(key_of(obj))
        else:
            self.store.put(obj)


class PrimaryKind:
    """One kind of watches.yaml: found through discovery (its CRD may be installed after the operator starts),
    then listed and watched in each watched namespace, or cluster-wide, into its ObjectStore."""

    def __init__(self, api: ApiSession, kube: Kube, watch: Watch, store: ObjectStore,
                 namespaces: tuple[str, ...]) -> None:
        self.api, self.kube, self.watch, self.store, self.namespaces = api, kube, watch, store, namespaces
        self.reflectors: list[Reflector] = []
        self.resource: Resource | None = None
        self._found = asyncio.Event()

    async def get(self) -> Resource:
        """The kind's plural and scope, once discovery has found them."""
        await self._found.wait()
        assert self.resource is not None
        return self.resource

    @property
    def synced(self) -> bool:
        return bool(self.reflectors) and all(r.synced.is_set() for r in self.reflectors)

    async def wait_synced(self) -> None:
        """Until the kind is served and each of its scopes has been listed once (client-go's HasSynced)."""
        await self._found.wait()
        await asyncio.gather(*(r.synced.wait() for r in self.reflectors))

    async def run(self) -> None:
        res = await self._discover()
        params = {} if self.watch.selector.empty else {"labelSelector": selector_string(self.watch.selector)}
        scopes: list[str | None] = list(self.namespaces) if res.namespaced and self.namespaces else [None]
        self.reflectors = [Reflector(self.api, res.path(ns), self.store.scope(ns),
                                     f"{self.watch.gvk}" + (f" in {ns}" if ns else ""), params=dict(params))
                           for ns in scopes]
        await asyncio.gather(*(r.run() for r in self.reflectors))

    async def _discover(self) -> Resource:
        delay, missing, failing = 1.0, False, False
        while True:
            try:
                self.resource = await self.kube.discover(self.watch.gvk)
                if missing or failing:
                    log.info("%s is served now", self.watch.gvk)
                self._found.set()
                return self.resource
            except NotFound:
                if not missing:
                    log.warning("%s is not served by the API server (is its CRD installed?): it will be served "
                                "once it is", self.watch.gvk)
                missing = True
            except (TimeoutError, ApiError, aiohttp.ClientError, OSError) as exc:
                (log.debug if failing else log.info)("discovery of %s failed (%s); retrying", self.watch.gvk, exc)
                failing = True
            await asyncio.sleep(delay)
            delay = min(delay * 2, 10.0)
