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
(410 Gone) is resumed by a relist that compares what it finds with what it remembered, so nothing is
missed (deleted or changed meanwhile) and nothing is repeated.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from .apisession import ApiSession
from .config import GVK, Watch
from .proxy import PRIMARY_RESOURCE, PRIMARY_RESOURCE_TYPE, OwnWrites
from .queue import Key

log = logging.getLogger(__name__)

METADATA_LIST = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"
METADATA = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json"
PAGE = 500


class Gone(Exception):
    pass


@dataclass
class _Seen:
    generation: int | None
    resource_version: str
    owners: list[tuple[GVK, Key]]


@dataclass
class DependentKind:
    gvk: GVK
    plural: str
    namespaced: bool
    tasks: list[asyncio.Task[None]] = field(default_factory=list)
    owned: dict[str, _Seen] = field(default_factory=dict)  # uid → what we last saw (owned objects only)
    synced: asyncio.Event = field(default_factory=asyncio.Event)


class DependentWatcher:
    def __init__(self, api: ApiSession, watches: list[Watch], namespaces: tuple[str, ...], own_writes: OwnWrites,
                 enqueue: Callable[[GVK, Key], None]) -> None:
        self.api = api
        self.namespaces = namespaces
        self.own_writes = own_writes
        self.enqueue = enqueue
        # owner kind (group, Kind) → its watch, for ownerReference and annotation matching
        self.owners = {(w.gvk.group, w.gvk.kind): w for w in watches}
        self.kinds: dict[GVK, DependentKind] = {}
        self._stopping = False
        self._background: set[asyncio.Task[None]] = set()

    # ------------------------------------------------------------------ registration
    def wants(self, owner_watch: Watch, gvk: GVK, namespaced: bool) -> bool:
        if not owner_watch.watch_dependent_resources or gvk in owner_watch.blacklist:
            return False
        if (gvk.group, gvk.kind) in self.owners:
            return False  # a primary kind is watched by kopf already
        return namespaced or owner_watch.watch_cluster_scoped_resources

    def ensure(self, owner_watch: Watch, gvk: GVK, plural: str, namespaced: bool) -> None:
        if self._stopping or gvk in self.kinds or not self.wants(owner_watch, gvk, namespaced):
            return
        kind = DependentKind(gvk, plural, namespaced)
        self.kinds[gvk] = kind
        scopes: list[str | None] = list(self.namespaces) if (self.namespaces and namespaced) else [None]
        for ns in scopes:
            kind.tasks.append(asyncio.create_task(self._run(kind, ns), name=f"dependents-{gvk.kind}-{ns or 'all'}"))
        log.info("watching %s as a dependent kind", gvk)

    def written(self, gvk: GVK, meta: dict[str, Any]) -> None:
        """A run wrote this dependent (through the proxy). Remembered as if watched, so that a relist after a
        watch outage notices it gone even if it was created and deleted while the watch was down."""
        kind = self.kinds.get(gvk)
        uid = meta.get("uid")
        if kind is not None and uid and uid not in kind.owned and (owners := self.owners_of(meta)):
            kind.owned[uid] = _Seen(meta.get("generation"), meta.get("resourceVersion", ""), owners)

    async def stop(self) -> None:
        self._stopping = True
        tasks = [t for k in self.kinds.values() for t in k.tasks]
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
                found.append((watch.gvk, (meta.get("namespace") or "", ref.get("name", ""))))
        ann = meta.get("annotations") or {}
        if PRIMARY_RESOURCE in ann and PRIMARY_RESOURCE_TYPE in ann:
            kind, _, group = ann[PRIMARY_RESOURCE_TYPE].partition(".")
            watch = self.owners.get((group, kind))
            ns, _, name = ann[PRIMARY_RESOURCE].rpartition("/")
            if watch is not None:
                found.append((watch.gvk, (ns, name)))
        return found

    def _trigger(self, kind: DependentKind, meta: dict[str, Any], owners: list[tuple[GVK, Key]], why: str) -> None:
        for owner_gvk, key in owners:
            log.debug("%s %s/%s %s: requeue %s %s/%s", kind.gvk.kind, meta.get("namespace"), meta.get("name"), why,
                      owner_gvk.kind, *key)
            self.enqueue(owner_gvk, key)

    # ------------------------------------------------------------------ the watch
    def _path(self, kind: DependentKind, namespace: str | None) -> str:
        g = kind.gvk
        base = f"/apis/{g.group}/{g.version}" if g.group else f"/api/{g.version}"
        if namespace:
            base += f"/namespaces/{namespace}"
        return f"{base}/{kind.plural}"

    async def _run(self, kind: DependentKind, namespace: str | None) -> None:
        backoff = 0.5
        rv: str | None = None
        while not self._stopping:
            try:
                if rv is None:
                    rv = await self._relist(kind, namespace)
                    kind.synced.set()
                rv = await self._watch(kind, namespace, rv)
                backoff = 0.5
            except Gone:
                log.info("watch of %s expired (410 Gone): relisting", kind.gvk)
                rv = None
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("watch of %s interrupted (%s); retrying in %.1fs", kind.gvk, exc or type(exc).__name__,
                            backoff)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 10)

    async def _relist(self, kind: DependentKind, namespace: str | None) -> str:
        """Lists metadata page by page; compares owned objects with what we remembered (after a 410 or an
        outage) and requeues the owners of those that changed or went away."""
        seen_now: dict[str, _Seen] = {}
        token, rv = None, ""
        while True:
            params = {"limit": str(PAGE)}
            if token:
                params["continue"] = token
            async with self.api.request("GET", self._path(kind, namespace), params=params,
                                        headers={"Accept": METADATA_LIST}) as resp:
                if resp.status == 410:
                    token = None
                    seen_now.clear()
                    continue
                resp.raise_for_status()
                page = await resp.json()
            for item in page.get("items", []):
                meta = item.get("metadata", {})
                owners = self.owners_of(meta)
                if not owners:
                    continue
                now = _Seen(meta.get("generation"), meta.get("resourceVersion", ""), owners)
                seen_now[meta["uid"]] = now
                before = kind.owned.get(meta["uid"])
                if before is not None and now.resource_version not in self.own_writes \
                        and (requeued := self._requeued(before, now)):
                    self._trigger(kind, meta, requeued, "changed while not watched")
            rv = page.get("metadata", {}).get("resourceVersion", "")
            token = page.get("metadata", {}).get("continue")
            if not token:
                break
        for uid, before in kind.owned.items():
            if uid not in seen_now:
                self._trigger(kind, {"uid": uid}, before.owners, "deleted while not watched")
        kind.owned = seen_now
        return rv

    def _requeued(self, before: _Seen, now: _Seen) -> list[tuple[GVK, Key]]:
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

    async def _watch(self, kind: DependentKind, namespace: str | None, rv: str) -> str:
        params = {"watch": "1", "resourceVersion": rv, "allowWatchBookmarks": "true", "timeoutSeconds": "300"}
        async with self.api.request("GET", self._path(kind, namespace), params=params,
                                    headers={"Accept": METADATA},
                                    timeout=aiohttp.ClientTimeout(total=None, sock_read=330)) as resp:
            if resp.status == 410:
                raise Gone()
            resp.raise_for_status()
            async for line in resp.content:
                if not line.strip():
                    continue
                event = json.loads(line)
                etype, obj = event.get("type"), event.get("object") or {}
                meta = obj.get("metadata", {})
                if etype == "ERROR":
                    if obj.get("code") == 410:
                        raise Gone()
                    raise RuntimeError(obj.get("message", "watch error"))
                rv = meta.get("resourceVersion") or rv
                if etype == "BOOKMARK":
                    continue
                self._event(kind, etype, meta)
        return rv

    def _event(self, kind: DependentKind, etype: str, meta: dict[str, Any]) -> None:
        uid = meta.get("uid", "")
        owners = self.owners_of(meta)
        before = kind.owned.get(uid)
        now = _Seen(meta.get("generation"), meta.get("resourceVersion", ""), owners)
        if etype == "DELETED":
            kind.owned.pop(uid, None)
            if owners:
                self._trigger(kind, meta, owners, "deleted")
            return
        if not owners:
            kind.owned.pop(uid, None)  # no longer ours (or never was): forget it
            return
        kind.owned[uid] = now
        if etype == "ADDED" or before is None:
            return  # creations do not requeue (the owner's run made it, or will see it)
        if now.resource_version in self.own_writes:
            return  # the role's own write, during its run
        owners = self._requeued(before, now)
        if not owners:
            return  # nothing that matters changed
        key = (kind.gvk.group, kind.plural, meta.get("namespace") or "", meta.get("name", ""))
        if self.own_writes.pending(key):
            # The role is writing this object right now: decide once that write's response is in.
            task = asyncio.create_task(self._after_write(kind, meta, owners, key, now.resource_version))
            self._background.add(task)
            task.add_done_callback(self._background.discard)
            return
        self._trigger(kind, meta, owners, "changed")

    async def _after_write(self, kind: DependentKind, meta: dict[str, Any], owners: list[tuple[GVK, Key]],
                           key: tuple[str, str, str, str], rv: str) -> None:
        try:
            await self.own_writes.settled(key)
        except TimeoutError:
            pass
        if rv not in self.own_writes:
            self._trigger(kind, meta, owners, "changed")


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
