"""Watches the kinds that roles create, and brings the owner back when someone changes or deletes one.

Each dependent kind gets one watch (cluster-wide, or one per watched namespace) that asks the API
server for metadata only (``as=PartialObjectMetadata``) and keeps state only for owned objects:
memory does not grow with the unowned objects of that kind in the cluster (a ConfigMap watch over
5,000 unrelated ConfigMaps stores nothing for them).

What requeues the owner (the Go ansible-operator's rules): a deletion, always; a change of an owned
object's generation (spec), or of any part of an object without generation; never a creation, a
status-only update, or a write the role itself made (the proxy remembers those). An owner whose watch sets
``watchDependentStatusChanges`` (ours) also comes back for any other change of its dependents, their status
included: a database operator must hear at once that its primary's pod turned unready. A watch that expires
(410 Gone) is resumed by a relist (``reflector.py``) that compares what it finds with what it remembered, so
nothing is missed (deleted or changed meanwhile) and nothing is repeated.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from .apisession import ApiSession
from .config import GVK, RECORDED_DEPENDENTS_ANNOTATION, Watch
from .kube import METADATA, METADATA_LIST, ApiError, Kube, NotFound, Resource
from .ownership import PRIMARY_RESOURCE, PRIMARY_RESOURCE_TYPE, Owner, Target, linked
from .proxy import OwnWrites
from .queue import Key
from .reflector import Reflector

log = logging.getLogger(__name__)



@dataclass
class _Seen:
    generation: int | None
    resource_version: str
    owners: list[tuple[GVK, Key]]
    namespace: str = ""


@dataclass
class DependentKind:
    gvk: GVK
    plural: str
    namespaced: bool
    tasks: list[asyncio.Task[None]] = field(default_factory=list)
    owned: dict[str, _Seen] = field(default_factory=dict)  # uid → what we last saw (owned objects only)


@dataclass
class DependentScope:
    """What one dependent watch (a namespace, or the cluster) feeds: lists compared with what was remembered,
    and events."""

    watcher: DependentWatcher
    kind: DependentKind
    namespace: str | None
    _seen: dict[str, _Seen] = field(default_factory=dict)

    def _mine(self, seen: _Seen) -> bool:
        return self.namespace is None or seen.namespace == self.namespace

    def relist_begin(self) -> None:
        self._seen = {}

    def listed(self, item: dict[str, Any]) -> None:
        """After a 410 or an outage, owners of objects that changed meanwhile come back."""
        meta = item.get("metadata") or {}
        owners = self.watcher.owners_of(meta)
        if not owners:
            return
        now = _Seen(meta.get("generation"), meta.get("resourceVersion", ""), owners, meta.get("namespace") or "")
        self._seen[meta["uid"]] = now
        before = self.kind.owned.get(meta["uid"])
        if before is not None and now.resource_version not in self.watcher.own_writes \
                and (requeued := self.watcher.requeued(before, now)):
            self.watcher.trigger(self.kind, meta, requeued, "changed while not watched")

    def relist_end(self) -> None:
        """... and owners of objects that went away meanwhile."""
        for uid, before in list(self.kind.owned.items()):
            if self._mine(before) and uid not in self._seen:
                self.watcher.trigger(self.kind, {"uid": uid}, before.owners, "deleted while not watched")
                del self.kind.owned[uid]
        self.kind.owned.update(self._seen)
        self._seen = {}

    def event(self, etype: str, obj: dict[str, Any]) -> None:
        self.watcher.event(self.kind, etype, obj.get("metadata") or {})


class DependentWatcher:
    def __init__(self, api: ApiSession, watches: list[Watch], namespaces: tuple[str, ...], own_writes: OwnWrites,
                 enqueue: Callable[[GVK, Key], None], owner_namespaced: Callable[[GVK], bool]) -> None:
        self.api = api
        self.namespaces = namespaces
        self.own_writes = own_writes
        self.enqueue = enqueue
        # owner kind (group, Kind) → its watch, for ownerReference and annotation matching
        self.owners = {(w.gvk.group, w.gvk.kind): w for w in watches}
        # whether an owner kind is namespaced: a cluster-scoped owner's key has no namespace, whatever its
        # dependent's (controller-runtime's EnqueueRequestForOwner asks the RESTMapper the same)
        self.owner_namespaced = owner_namespaced
        self.kinds: dict[GVK, DependentKind] = {}
        self._stopping = False
        self._background: set[asyncio.Task[None]] = set()

    # ------------------------------------------------------------------ registration
    def wants(self, owner_watch: Watch, gvk: GVK, namespaced: bool) -> bool:
        if not owner_watch.watch_dependent_resources or gvk in owner_watch.blacklist:
            return False
        if (gvk.group, gvk.kind) in self.owners:
            return False  # a primary kind is watched as such already
        return namespaced or owner_watch.watch_cluster_scoped_resources

    def ensure(self, owner_watch: Watch, gvk: GVK, plural: str, namespaced: bool) -> None:
        if self._stopping or gvk in self.kinds or not self.wants(owner_watch, gvk, namespaced):
            return
        kind = DependentKind(gvk, plural, namespaced)
        self.kinds[gvk] = kind
        scopes: list[str | None] = list(self.namespaces) if (self.namespaces and namespaced) else [None]
        for ns in scopes:
            reflector = Reflector(self.api, self._path(kind, ns), DependentScope(self, kind, ns),
                                  f"{gvk}" + (f" in {ns}" if ns else ""),
                                  list_accept=METADATA_LIST, watch_accept=METADATA)
            kind.tasks.append(asyncio.create_task(reflector.run(), name=f"dependents-{gvk.kind}-{ns or 'all'}"))
        log.info("watching %s as a dependent kind", gvk)

    def seen(self, owner: Owner, target: Target, meta: dict[str, Any]) -> None:
        """The proxy saw an object linked to ``owner`` (``meta`` when a run wrote it): its kind is watched."""
        watch = self.owners.get((owner.gvk.group, owner.gvk.kind))
        if watch is None:
            return
        self.ensure(watch, target.gvk, target.plural, target.namespaced)
        if meta:
            self.written(target.gvk, meta)

    def written(self, gvk: GVK, meta: dict[str, Any]) -> None:
        """A run wrote this dependent (through the proxy). Remembered as if watched, so that a relist after a
        watch outage notices it gone even if it was created and deleted while the watch was down."""
        kind = self.kinds.get(gvk)
        uid = meta.get("uid")
        if kind is not None and uid and uid not in kind.owned and (owners := self.owners_of(meta)):
            kind.owned[uid] = _Seen(meta.get("generation"), meta.get("resourceVersion", ""), owners,
                                    meta.get("namespace") or "")

    async def stop(self) -> None:
        self._stopping = True
        tasks = [t for k in self.kinds.values() for t in k.tasks] + list(self._background)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    # ------------------------------------------------------------------ owners of an object
    def owners_of(self, meta: dict[str, Any]) -> list[tuple[GVK, Key]]:
        found = []
        for ref in meta.get("ownerReferences") or []:
            group = ref.get("apiVersion", "").rpartition("/")[0]
            watch = self.owners.get((group, ref.get("kind")))
            if watch is not None:
                # A namespaced owner lives in its dependent's namespace; a cluster-scoped one has none.
                namespace = (meta.get("namespace") or "") if self.owner_namespaced(watch.gvk) else ""
                found.append((watch.gvk, (namespace, ref.get("name", ""))))
        ann = meta.get("annotations") or {}
        if PRIMARY_RESOURCE in ann and PRIMARY_RESOURCE_TYPE in ann:
            kind, _, group = ann[PRIMARY_RESOURCE_TYPE].partition(".")
            watch = self.owners.get((group, kind))
            ns, _, name = ann[PRIMARY_RESOURCE].rpartition("/")
            if watch is not None:
                found.append((watch.gvk, (ns, name)))
        return found

    def trigger(self, kind: DependentKind, meta: dict[str, Any], owners: list[tuple[GVK, Key]], why: str) -> None:
        for owner_gvk, key in owners:
            log.debug("%s %s/%s %s: requeue %s %s/%s", kind.gvk.kind, meta.get("namespace"), meta.get("name"), why,
                      owner_gvk.kind, *key)
            self.enqueue(owner_gvk, key)

    # ------------------------------------------------------------------ what a change means
    def _path(self, kind: DependentKind, namespace: str | None) -> str:
        g = kind.gvk
        base = f"/apis/{g.group}/{g.version}" if g.group else f"/api/{g.version}"
        if namespace:
            base += f"/namespaces/{namespace}"
        return f"{base}/{kind.plural}"

    def requeued(self, before: _Seen, now: _Seen) -> list[tuple[GVK, Key]]:
        """The owners a change brings back: all of them for a change that matters, else those whose watch
        wants status changes too (any change of the object)."""
        if self._changed(before, now):
            return now.owners
        if now.resource_version == before.resource_version:
            return []
        return [(gvk, key) for gvk, key in now.owners
                if (w := self.owners.get((gvk.group, gvk.kind))) is not None and w.watch_dependent_status_changes]

    @staticmethod
    def _changed(before: _Seen, now: _Seen) -> bool:
        if now.generation is not None and before.generation is not None:
            return now.generation != before.generation
        return now.resource_version != before.resource_version

    def event(self, kind: DependentKind, etype: str, meta: dict[str, Any]) -> None:
        uid = meta.get("uid", "")
        owners = self.owners_of(meta)
        before = kind.owned.get(uid)
        now = _Seen(meta.get("generation"), meta.get("resourceVersion", ""), owners, meta.get("namespace") or "")
        if etype == "DELETED":
            kind.owned.pop(uid, None)
            if owners:
                self.trigger(kind, meta, owners, "deleted")
            return
        if not owners:
            kind.owned.pop(uid, None)  # no longer ours (or never was): forget it
            return
        kind.owned[uid] = now
        if etype == "ADDED" or before is None:
            return  # creations do not requeue (the owner's run made it, or will see it)
        if now.resource_version in self.own_writes:
            return  # the role's own write, during its run
        owners = self.requeued(before, now)
        if not owners:
            return  # nothing that matters changed
        key = (kind.gvk.group, kind.plural, meta.get("namespace") or "", meta.get("name", ""))
        if self.own_writes.pending(key):
            # The role is writing this object right now: decide once that write's response is in.
            task = asyncio.create_task(self._after_write(kind, meta, owners, key, now.resource_version))
            self._background.add(task)
            task.add_done_callback(self._background.discard)
            return
        self.trigger(kind, meta, owners, "changed")

    async def _after_write(self, kind: DependentKind, meta: dict[str, Any], owners: list[tuple[GVK, Key]],
                           key: tuple[str, str, str, str], rv: str) -> None:
        try:
            await self.own_writes.settled(key)
        except TimeoutError:
            pass
        if rv not in self.own_writes:
            self.trigger(kind, meta, owners, "changed")


# Held on an owner while it has recorded dependents (the name predates the records by UID).
CLEANUP_FINALIZER = "playbook-operator.dev/cleanup-annotated-dependents"
# Records are kept short: past this many, those of objects already gone are dropped first.
PRUNE_AT = 100


class CleanupFailed(Exception):
    """Recorded dependents that could not be deleted, each with the API server's answer."""


@dataclass(frozen=True)
class Recorded:
    path: str  # the object's API path
    uid: str

    @property
    def name(self) -> str:
        """namespace/name (or name), for messages."""
        parts = self.path.split("/")
        return f"{parts[parts.index('namespaces') + 1]}/{parts[-1]}" if "namespaces" in parts else parts[-1]


def object_path(target: Target, meta: dict[str, Any]) -> str:
    g = target.gvk
    base = f"/apis/{g.group}/{g.version}" if g.group else f"/api/{g.version}"
    namespace = meta.get("namespace")
    return f"{base}/namespaces/{namespace}/{target.plural}/{meta['name']}" if target.namespaced and namespace \
        else f"{base}/{target.plural}/{meta['name']}"


def recorded(obj: dict[str, Any]) -> list[Recorded]:
    raw = ((obj.get("metadata") or {}).get("annotations") or {}).get(RECORDED_DEPENDENTS_ANNOTATION)
    try:
        entries = json.loads(raw) if raw else []
        return [Recorded(str(e["path"]), str(e["uid"])) for e in entries]
    except (ValueError, TypeError, KeyError):
        log.warning("ignoring the unreadable annotation %s of %s %s", RECORDED_DEPENDENTS_ANNOTATION,
                    obj.get("kind"), (obj.get("metadata") or {}).get("name"))
        return []


class DependentRecords:
    """Objects linked to their owner by annotations (cluster-scoped, or in another namespace) are beyond
    garbage collection. Each one a run creates is recorded on its owner when it is created, by path and UID
    (``RECORDED_DEPENDENTS_ANNOTATION``), and the owner is held by the runtime's finalizer; when the owner is
    deleted, exactly those objects are deleted, each only if it is still the object recorded (its UID, as a
    precondition of the DELETE) and still names this owner. No lists: what a run only changed is never
    deleted, and the operator needs no cluster-wide access for it."""

    def __init__(self, kube: Kube, resource_of: Callable[[GVK], Awaitable[Resource]]) -> None:
        self.kube = kube
        self.resource_of = resource_of
        self._held: set[str] = set()  # owners (UIDs) known to hold the finalizer: each run applies its dependents

    async def hold(self, owner: Owner) -> None:
        """Before a run creates an annotation-linked object: the owner holds the cleanup's finalizer, so that the
        object, once recorded, goes with it. Raises ApiError 409 when the owner is being deleted without it (it
        takes no new finalizer then, and what was created now would be left behind), NotFound when it is gone."""
        if owner.uid not in self._held:
            await self._patch(owner, None)
            self._held.add(owner.uid)

    async def record(self, owner: Owner, target: Target, meta: dict[str, Any]) -> None:
        await self._patch(owner, Recorded(object_path(target, meta), meta["uid"]))

    async def _patch(self, owner: Owner, entry: Recorded | None) -> None:
        res = await self.resource_of(owner.gvk)
        for _ in range(8):
            obj = await self.kube.get_or_none(res, owner.namespace, owner.name)
            if obj is None or obj["metadata"].get("uid") != owner.uid:
                raise NotFound(f"{owner.kind} {owner.namespace}/{owner.name}")
            meta_now = obj["metadata"]
            finalizers = list(meta_now.get("finalizers") or [])
            # An owner being deleted takes no new finalizer, but one that holds the cleanup's already (a run
            # still under way when it was deleted) is cleaned up after that run: what it creates is recorded.
            if meta_now.get("deletionTimestamp") and CLEANUP_FINALIZER not in finalizers:
                raise ApiError(409, "Conflict", f"{owner.kind} {owner.namespace}/{owner.name} is being deleted")
            entries = recorded(obj)
            if (entry is None and CLEANUP_FINALIZER in finalizers) or (entry is not None and entry in entries):
                return
            if len(entries) >= PRUNE_AT:
                entries = [e for e in entries if await self._still_there(e)]
            patch: dict[str, Any] = {"metadata": {
                "resourceVersion": meta_now["resourceVersion"],
                "finalizers": finalizers + ([CLEANUP_FINALIZER] if CLEANUP_FINALIZER not in finalizers else [])}}
            if entry is not None:
                patch["metadata"]["annotations"] = {RECORDED_DEPENDENTS_ANNOTATION: json.dumps(
                    [{"path": e.path, "uid": e.uid} for e in [*entries, entry]], separators=(",", ":"))}
            try:
                await self.kube.patch(res, owner.namespace, owner.name, patch)
                return
            except ApiError as exc:
                if exc.status != 409:
                    raise
        raise ApiError(409, "Conflict", f"{owner.kind} {owner.namespace}/{owner.name} kept changing")

    async def _still_there(self, entry: Recorded) -> bool:
        try:
            meta = (await self.kube.request("GET", entry.path, accept=METADATA) or {}).get("metadata") or {}
        except NotFound:
            return False
        return meta.get("uid") == entry.uid

    async def cleanup(self, owner: dict[str, Any], owner_gvk: GVK) -> int:
        """Deletes what was recorded on ``owner``; returns how many. Raises CleanupFailed, naming each object
        the API server did not let go (the owner keeps the finalizer until they go)."""
        namespace = (owner.get("metadata") or {}).get("namespace") or ""
        self._held.discard(owner["metadata"]["uid"])
        me = Owner(owner.get("apiVersion", ""), owner.get("kind", ""), owner["metadata"]["name"], namespace,
                   owner["metadata"]["uid"], owner_gvk)
        deleted, failures = 0, []
        for entry in recorded(owner):
            try:
                deleted += await self._delete(entry, me)
            except (ApiError, aiohttp.ClientError, TimeoutError) as exc:
                failures.append(f"{entry.name} ({entry.path}): {exc or type(exc).__name__}")
        if failures:
            raise CleanupFailed("could not delete the dependents recorded for it: " + "; ".join(failures))
        return deleted

    async def _delete(self, entry: Recorded, owner: Owner) -> int:
        try:
            meta = (await self.kube.request("GET", entry.path, accept=METADATA) or {}).get("metadata") or {}
        except NotFound:
            return 0
        if meta.get("uid") != entry.uid:
            return 0  # another object of that name now: not ours to delete
        if linked(meta, owner) is None:
            log.warning("not deleting %s: it no longer names %s %s as its owner", entry.path, owner.kind, owner.name)
            return 0
        options = {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": entry.uid},
                   "propagationPolicy": "Background"}
        try:
            await self.kube.request("DELETE", entry.path, options)
        except NotFound:
            return 0
        except ApiError as exc:
            if exc.status == 409:  # the precondition: the recorded object is gone, another has its name
                return 0
            raise
        return 1
