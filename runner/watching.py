"""kopf watches each kind; every event updates the newest copy of the object and, when it is a change
the operator should act on, queues the object's key.

What counts as a change (the ansible-operator's predicates, minus its feedback loops): a new object, a
change of anything outside metadata and status (the spec), a deletion request, and, with
``watchAnnotationsChanges``, an annotation change. Status and other metadata changes, including the
operator's own writes, do not trigger runs. ``selector`` is applied by the API server (label selector
on the watch) and checked again here.
"""

from __future__ import annotations

import copy
import logging
from typing import Any

import kopf

from . import metrics
from .config import LabelSelector, Watch
from .queue import CHANGE, Key, WorkQueue

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


def _content(obj: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in obj.items() if k not in ("metadata", "status")}


class ObjectStore:
    """The newest copy of each watched object of one kind (only those matching the selector)."""

    def __init__(self, watch: Watch) -> None:
        self.watch = watch
        self._objects: dict[Key, dict[str, Any]] = {}

    def latest(self, key: Key) -> dict[str, Any] | None:
        return self._objects.get(key)

    def observed(self, key: Key, obj: dict[str, Any]) -> None:
        """The reconciler read or wrote this version itself; newer watch events still win."""
        current = self._objects.get(key)
        if current is None:
            return
        try:
            if int(obj["metadata"]["resourceVersion"]) < int(current["metadata"]["resourceVersion"]):
                return
        except (KeyError, ValueError):
            pass
        self._objects[key] = obj

    def apply(self, event_type: str | None, obj: dict[str, Any]) -> tuple[Key, str | None]:
        """Records the event; returns the key and what to do: "enqueue", "forget" or None."""
        meta = obj.get("metadata", {})
        key: Key = (meta.get("namespace") or "", meta.get("name", ""))
        if event_type == "DELETED" or not self.watch.selector.matches(meta.get("labels")):
            metrics.forget_resource(metrics.owner_of(self.watch.gvk, key))
            return key, "forget" if self._objects.pop(key, None) is not None or event_type == "DELETED" else None
        prev = self._objects.get(key)
        self._objects[key] = obj
        metrics.observe_resource(metrics.owner_of(self.watch.gvk, key), obj)
        if prev is None:
            return key, "enqueue"
        pmeta = prev.get("metadata", {})
        if meta.get("deletionTimestamp") and not pmeta.get("deletionTimestamp"):
            return key, "enqueue"
        if _content(obj) != _content(prev):
            return key, "enqueue"
        if "generation" not in meta and meta.get("resourceVersion") != pmeta.get("resourceVersion") \
                and obj.get("status") == prev.get("status"):
            return key, "enqueue"  # kinds without generation: any update but our status writes
        if self.watch.watch_annotations_changes and meta.get("annotations") != pmeta.get("annotations"):
            return key, "enqueue"
        return key, None


def register(registry: kopf.OperatorRegistry, settings: kopf.OperatorSettings, watch: Watch,
             store: ObjectStore, queue: WorkQueue) -> None:
    gvk = watch.gvk
    if not watch.selector.empty:
        settings.watching.label_selectors[gvk.group, gvk.version, gvk.kind] = selector_string(watch.selector)

    async def on_event(event: kopf.RawEvent, **_: Any) -> None:
        obj = copy.deepcopy(event["object"])
        key, action = store.apply(event.get("type"), obj)
        if action == "enqueue":
            queue.add(key, CHANGE)
        elif action == "forget":
            # One last pass finds the object gone and removes its runner directories; a run in progress
            # finds it gone when it ends.
            queue.forget(key)
            queue.add(key, CHANGE)

    kopf.on.event(gvk.group, gvk.version, gvk.kind, registry=registry, id=f"watch-{gvk.kind}")(on_event)
