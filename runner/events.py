"""Kubernetes Events on the objects the operator manages (failures, recoveries), visible in
``kubectl describe``. Repeats of the same reason and message bump the count of one Event, as
client-go's recorder does, instead of piling up new ones."""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
import os
import socket
from typing import Any

from .apisession import Fenced
from .config import GVK
from .kube import MERGE_PATCH, Kube, NotFound

log = logging.getLogger(__name__)

COMPONENT = "playbook-operator"
EVENTS = GVK("", "v1", "Event")
MAX_MESSAGE = 1024


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Recorder:
    def __init__(self, kube: Kube) -> None:
        self.kube = kube
        self.host = os.environ.get("POD_NAME") or socket.gethostname()

    async def record(self, obj: dict[str, Any], etype: str, reason: str, message: str) -> None:
        """Never raises: an Event is not worth failing a reconcile."""
        meta = obj.get("metadata", {})
        namespace = meta.get("namespace") or "default"
        message = message if len(message) <= MAX_MESSAGE else message[: MAX_MESSAGE - 3] + "..."
        digest = hashlib.sha256(f"{meta.get('uid')}|{etype}|{reason}|{message}".encode()).hexdigest()[:12]
        name = f"{meta.get('name')}.{digest}"
        try:
            res = await self.kube.discover(EVENTS)
            try:
                existing = await self.kube.get(res, namespace, name)
                await self.kube.patch(res, namespace, name, {
                    "count": int(existing.get("count") or 1) + 1, "lastTimestamp": _now()}, MERGE_PATCH)
                return
            except NotFound:
                pass
            now = _now()
            await self.kube.create(res, namespace, {
                "apiVersion": "v1", "kind": "Event",
                "metadata": {"name": name, "namespace": namespace},
                "involvedObject": {"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind"),
                                   "name": meta.get("name"), "namespace": meta.get("namespace"),
                                   "uid": meta.get("uid"), "resourceVersion": meta.get("resourceVersion")},
                "type": etype, "reason": reason, "message": message, "count": 1,
                "firstTimestamp": now, "lastTimestamp": now,
                "source": {"component": COMPONENT, "host": self.host},
                "reportingComponent": COMPONENT, "reportingInstance": self.host,
            })
        except Fenced:
            log.debug("event %s not recorded: this operator is no longer sure it leads", reason)
        except Exception as exc:
            log.warning("could not record event %s on %s %s/%s: %s", reason, obj.get("kind"),
                        meta.get("namespace"), meta.get("name"), exc)
