"""Kubernetes API access for the runtime: resource discovery, object reads, status and metadata writes.

The official client is synchronous; every call goes through ``Kube.call`` so that it runs in a thread
and never blocks the event loop kopf and the queue share.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

from kubernetes import client, config
from kubernetes.client.rest import ApiException

from .config import GVK

log = logging.getLogger(__name__)
T = TypeVar("T")

MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"


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


class NotFound(Exception):
    pass


def load_client_config() -> client.Configuration:
    """In-cluster credentials when running in a pod, else KUBECONFIG / ~/.kube/config."""
    cfg = client.Configuration()
    try:
        config.load_incluster_config(client_configuration=cfg)
    except config.ConfigException:
        config.load_kube_config(client_configuration=cfg)
    return cfg


class Kube:
    def __init__(self, configuration: client.Configuration | None = None, threads: int = 16) -> None:
        self.configuration = configuration or load_client_config()
        self.configuration.connection_pool_maxsize = max(threads, 4)
        self.api = client.ApiClient(self.configuration)
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="kube-api")
        self._resources: dict[GVK, Resource] = {}

    async def call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, functools.partial(fn, *args, **kwargs))

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        self.api.close()

    # ------------------------------------------------------------------ raw requests (sync)
    def request(self, method: str, path: str, body: Any = None, content_type: str | None = None,
                query: list[tuple[str, Any]] | None = None) -> Any:
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type or "application/json"
        try:
            req = self.api.param_serialize(method, path, query_params=query or [], header_params=headers,
                                           body=body, auth_settings=["BearerToken"])
            resp = self.api.call_api(*req)
            resp.read()
            if not 200 <= resp.status <= 299:
                self.api.response_deserialize(resp, {})  # raises the ApiException for the status
        except ApiException as exc:
            if exc.status == 404:
                raise NotFound(path) from exc
            raise
        return json.loads(resp.data) if resp.data else None

    def discover(self, gvk: GVK) -> Resource:
        cached = self._resources.get(gvk)
        if cached:
            return cached
        path = f"/apis/{gvk.group}/{gvk.version}" if gvk.group else f"/api/{gvk.version}"
        listing = self.request("GET", path)
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

    def get(self, res: Resource, namespace: str, name: str) -> dict[str, Any]:
        return self.request("GET", res.path(namespace, name))

    def get_or_none(self, res: Resource, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return self.get(res, namespace, name)
        except NotFound:
            return None

    def patch(self, res: Resource, namespace: str, name: str, body: Any, content_type: str = MERGE_PATCH,
              subresource: str | None = None) -> dict[str, Any]:
        return self.request("PATCH", res.path(namespace, name, subresource), body, content_type)

    def create(self, res: Resource, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        return self.request("POST", res.path(namespace), body)


def is_conflict(exc: BaseException) -> bool:
    return isinstance(exc, ApiException) and exc.status == 409
