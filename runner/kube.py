"""The runtime's own API requests: resource discovery, object reads, status and metadata writes.

Each is a coroutine on the operator's ``ApiSession`` (on the event loop the watches and the queues share), so nothing
here blocks the loop or needs a thread.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any

import aiohttp

from .apisession import ApiSession
from .config import GVK

log = logging.getLogger(__name__)

MERGE_PATCH = "application/merge-patch+json"
# What to Accept for an object's metadata only (or a list of them): less to send and to parse.
METADATA = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json"
METADATA_LIST = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"
JSON_PATCH = "application/json-patch+json"
# A request the API server does not answer in this time has gone astray; the caller's retry decides.
REQUEST_TIMEOUT = aiohttp.ClientTimeout(total=60, sock_connect=10)


@dataclass(frozen=True)
class Resource:
    gvk: GVK
    plural: str
    namespaced: bool
    has_status: bool

    def path(self, namespace: str | None = None, name: str | None = None, subresource: str | None = None) -> str:
        base = f"/apis/{self.gvk.group}/{self.gvk.version}" if self.gvk.group else f"/api/{self.gvk.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        if name:
            base += f"/{name}"
        if subresource:
            base += f"/{subresource}"
        return base


class ApiError(Exception):
    """The API server refused a request: its HTTP status, and its Status object's reason and message."""

    def __init__(self, status: int, reason: str, message: str = "") -> None:
        super().__init__(f"({status}) {reason}: {message}" if message else f"({status}) {reason}")
        self.status, self.reason, self.message = status, reason, message


class NotFound(ApiError):
    def __init__(self, what: str) -> None:
        super().__init__(404, "NotFound", what)


class Gone(Exception):
    """The object a reconcile is about no longer exists: deleted, or another object (another UID) has its name."""


def is_conflict(exc: BaseException) -> bool:
    return isinstance(exc, ApiError) and exc.status == 409


class Kube:
    """``fenced``: its writes are refused while the operator is not sure it leads (``ApiSession.fence``); the
    lease's own requests and reviews that change nothing are not."""

    def __init__(self, api: ApiSession, fenced: bool = True) -> None:
        self.api = api
        self.fenced = fenced
        self._resources: dict[GVK, Resource] = {}

    async def request(self, method: str, path: str, body: Any = None, content_type: str | None = None,
                      query: list[tuple[str, Any]] | None = None, accept: str = "application/json") -> Any:
        headers = {"Accept": accept}
        data = None
        if body is not None:
            headers["Content-Type"] = content_type or "application/json"
            data = json.dumps(body)
        async with self.api.request(method, path, headers=headers, data=data, params=query,
                                    timeout=REQUEST_TIMEOUT, fenced=self.fenced) as resp:
            raw = await resp.read()
            if resp.status == 404:
                raise NotFound(path)
            if not 200 <= resp.status <= 299:
                try:
                    answer = json.loads(raw)
                except ValueError:
                    answer = {}
                answer = answer if isinstance(answer, dict) else {}
                raise ApiError(resp.status, answer.get("reason") or resp.reason or "",
                               answer.get("message") or raw.decode(errors="replace")[:500])
        return json.loads(raw) if raw else None

    async def allowed(self, verb: str, group: str, resource: str, namespace: str = "", subresource: str = "") -> bool:
        """Whether this operator's credentials may do that (a SelfSubjectAccessReview)."""
        attributes = {"verb": verb, "group": group, "resource": resource, "namespace": namespace}
        if subresource:
            attributes["subresource"] = subresource
        review = await self.request("POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", {
            "apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": attributes}})
        return bool((review or {}).get("status", {}).get("allowed"))

    async def discover(self, gvk: GVK) -> Resource:
        cached = self._resources.get(gvk)
        if cached:
            return cached
        path = f"/apis/{gvk.group}/{gvk.version}" if gvk.group else f"/api/{gvk.version}"
        listing = await self.request("GET", path)
        plural, namespaced, has_status = None, True, False
        for r in listing.get("resources", []):
            if r.get("kind") == gvk.kind and "/" not in r["name"]:
                plural, namespaced = r["name"], bool(r.get("namespaced"))
        if plural is None:
            raise NotFound(f"{gvk} is not served by the API server (is its CRD installed?)")
        has_status = any(r["name"] == f"{plural}/status" for r in listing.get("resources", []))
        res = Resource(gvk, plural, namespaced, has_status)
        self._resources[gvk] = res
        return res

    async def get(self, res: Resource, namespace: str, name: str) -> dict[str, Any]:
        return await self.request("GET", res.path(namespace, name))

    async def get_or_none(self, res: Resource, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return await self.get(res, namespace, name)
        except NotFound:
            return None

    async def patch(self, res: Resource, namespace: str, name: str, body: Any, content_type: str = MERGE_PATCH,
                    subresource: str | None = None) -> dict[str, Any]:
        return await self.request("PATCH", res.path(namespace, name, subresource), body, content_type)

    async def create(self, res: Resource, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        return await self.request("POST", res.path(namespace), body)
