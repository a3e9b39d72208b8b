"""kopf watches each kind; every event updates the newest copy of the object and, when it is a change
the operator should act on, queues the object's key.

What counts as a change (the ansible-operator's predicates, minus its feedback loops): a new object, a
change of anything outside metadata and status (the spec), a deletion request, and, with
``watchAnnotationsChanges``, an annotation change. Status and other metadata changes, including the
operator's own writes, do not trigger runs. ``selector`` is applied by the API server (label selector
on the watch) and checked again here.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from . import metrics
from .config import LabelSelector, Watch
from .kopf_without_client import kopf
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
    """The newest copy of each watched object of one kind (only those matching the selector).

    Kept as compact JSON, not as dicts: with a thousand idle objects the dicts were most of what the operator
    grew by (about 15 KB an object, 2-3 KB as JSON). Each read is a fresh copy, so no caller changes another's.
    """

    def __init__(self, watch: Watch) -> None:
        self.watch = watch
        self._objects: dict[Key, bytes] = {}

    @staticmethod
    def _pack(obj: dict[str, Any]) -> bytes:
        return json.dumps(obj, separators=(",", ":")).encode()

    def latest(self, key: Key) -> dict[str, Any] | None:
        packed = self._objects.get(key)
        return json.loads(packed) if packed is not None else None

    def observed(self, key: Key, obj: dict[str, Any]) -> None:
        """The reconciler read or wrote this version itself; newer watch events still win."""
        current = self.latest(key)
        if current is None:
            return
        try:
            if int(obj["metadata"]["resourceVersion"]) < int(current["metadata"]["resourceVersion"]):
                return
        except (KeyError, ValueError):
            pass
        self._objects[key] = self._pack(obj)

    def apply(self, event_type: str | None, obj: dict[str, Any]) -> tuple[Key, str | None]:
        """Records the event; returns the key and what to do: "enqueue", "forget" or None."""
        meta = obj.get("metadata", {})
        key: Key = (meta.get("namespace") or "", meta.get("name", ""))
        if event_type == "DELETED" or not self.watch.selector.matches(meta.get("labels")):
            metrics.forget_resource(metrics.owner_of(self.watch.gvk, key))
            return key, "forget" if self._objects.pop(key, None) is not None or event_type == "DELETED" else None
        prev = self.latest(key)
        self._objects[key] = self._pack(obj)
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
        key, action = store.apply(event.get("type"), event["object"])  # the store keeps a copy of its own
        if action == "enqueue":
            queue.add(key, CHANGE)
        elif action == "forget":
            # One last pass finds the object gone and removes its runner directories; a run in progress
            # finds it gone when it ends.
            queue.forget(key)
            queue.add(key, CHANGE)

    kopf.on.event(gvk.group, gvk.version, gvk.kind, registry=registry, id=f"watch-{gvk.kind}")(on_event)
