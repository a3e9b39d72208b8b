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
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .apisession import ApiSession
from .config import GVK, Watch
from .proxy import PRIMARY_RESOURCE, PRIMARY_RESOURCE_TYPE, OwnWrites
from .queue import Key
from .reflector import Reflector

log = logging.getLogger(__name__)

METADATA_LIST = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"
METADATA = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json"


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


CLEANUP_FINALIZER = "playbook-operator.dev/cleanup-annotated-dependents"
ANNOTATED_KINDS = "playbook-operator.dev/annotated-dependents"


class AnnotatedCleanup:
    """Objects linked to their owner by annotations (cluster-scoped, or in another namespace) are not
    garbage-collected by Kubernetes. The runtime records their kinds on the owner, holds the owner with a
    finalizer of its own, and deletes them when the owner is deleted (also after an operator restart)."""

    def __init__(self, kube: Any) -> None:
        self.kube = kube
        self._recorded: set[tuple[str, str]] = set()

    async def record(self, owner_res: Any, namespace: str, name: str, uid: str, gvk: GVK, plural: str) -> None:
        """Adds the kind to the owner's list and our finalizer to the owner."""
        entry = f"{gvk.group}/{gvk.version}/{plural}"
        if (uid, entry) in self._recorded:
            return
        for _ in range(8):
            obj = await self.kube.get_or_none(owner_res, namespace, name)
            if obj is None or obj["metadata"].get("uid") != uid or obj["metadata"].get("deletionTimestamp"):
                return
            meta = obj["metadata"]
            kinds = [k for k in (meta.get("annotations") or {}).get(ANNOTATED_KINDS, "").split(",") if k]
            finalizers = list(meta.get("finalizers") or [])
            if entry in kinds and CLEANUP_FINALIZER in finalizers:
                break
            patch = {"metadata": {"resourceVersion": meta["resourceVersion"],
                                  "annotations": {ANNOTATED_KINDS: ",".join(sorted({*kinds, entry}))},
                                  "finalizers": finalizers + ([CLEANUP_FINALIZER] if CLEANUP_FINALIZER not in finalizers else [])}}
            try:
                await self.kube.patch(owner_res, namespace, name, patch)
                break
            except Exception as exc:
                if getattr(exc, "status", None) != 409:
                    raise
        self._recorded.add((uid, entry))

    async def cleanup(self, owner: dict[str, Any], owner_gvk: GVK) -> int:
        """Deletes every recorded-kind object annotated as this owner's; returns how many."""
        meta = owner["metadata"]
        want = f"{meta.get('namespace') or ''}/{meta['name']}"
        want_type = f"{owner_gvk.kind}.{owner_gvk.group}" if owner_gvk.group else owner_gvk.kind
        deleted = 0
        for entry in filter(None, (meta.get("annotations") or {}).get(ANNOTATED_KINDS, "").split(",")):
            group, version, plural = entry.split("/")
            base = f"/apis/{group}/{version}" if group else f"/api/{version}"
            items = (await self.kube.request("GET", f"{base}/{plural}")).get("items", [])
            for item in items:
                m = item["metadata"]
                if m.get("ownerReferences"):
                    continue  # garbage-collected with its own owner (also what older runs recorded)
                ann = m.get("annotations") or {}
                if ann.get(PRIMARY_RESOURCE) == want and ann.get(PRIMARY_RESOURCE_TYPE) == want_type:
                    path = f"{base}/namespaces/{m['namespace']}/{plural}/{m['name']}" if m.get("namespace") \
                        else f"{base}/{plural}/{m['name']}"
                    try:
                        await self.kube.request("DELETE", path)
                        deleted += 1
                    except Exception as exc:
                        if getattr(exc, "status", None) != 404 and type(exc).__name__ != "NotFound":
                            raise
        return deleted
