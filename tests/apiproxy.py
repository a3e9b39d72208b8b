"""A proxy in front of the test cluster's API server, for what a test must see or break between an operator
and the API server: it records every request an operator makes (when, what, the answer) and answers some
with a fault of the test's choosing instead of passing them on.

An operator given ``ApiProxy.kubeconfig`` reaches the API server only through it (plain HTTP on loopback;
the proxy holds the cluster's credentials). Watches and other streams are passed on as they arrive.
"""

from __future__ import annotations

import asyncio
import base64
import re
import ssl
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import yaml
from aiohttp import web

HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "upgrade", "host", "authorization",
              "content-length", "accept-encoding", "content-encoding"}
WRITES = {"POST", "PUT", "PATCH", "DELETE"}


@dataclass(frozen=True)
class Request:
    at: float  # time.time() when the request arrived
    method: str
    path: str  # with the query
    status: int  # the answer's status (0: no answer)

    @property
    def write(self) -> bool:
        return self.method in WRITES


@dataclass
class Fault:
    """Requests matching ``method`` and ``path`` (regular expressions, searched) are answered, after ``delay``
    seconds, with ``status`` and a Kubernetes Status object, or passed on if ``status`` is None (a slow API
    server); ``times`` times (None: until removed)."""

    method: str
    path: str
    status: int | None
    message: str = "injected by the test"
    reason: str = "InternalError"
    times: int | None = None
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0

    def matches(self, method: str, path: str) -> bool:
        return bool(re.search(self.method, method) and re.search(self.path, path)) and self.times != 0


class ApiProxy:
    def __init__(self, kubeconfig: Path) -> None:
        config = yaml.safe_load(kubeconfig.read_text())
        cluster, user = config["clusters"][0]["cluster"], config["users"][0]["user"]
        self.upstream = cluster["server"].rstrip("/")
        self._tls = ssl.create_default_context(cadata=base64.b64decode(cluster["certificate-authority-data"]).decode())
        self._headers: dict[str, str] = {}
        if "client-certificate-data" in user:
            self._keys = tempfile.TemporaryDirectory(prefix="apiproxy-")
            pem = Path(self._keys.name) / "client.pem"
            pem.write_bytes(base64.b64decode(user["client-certificate-data"]) + b"\n"
                            + base64.b64decode(user["client-key-data"]))
            self._tls.load_cert_chain(pem)
        elif "token" in user:
            self._headers["Authorization"] = f"Bearer {user['token']}"
        self.requests: list[Request] = []
        self.faults: list[Fault] = []
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="apiproxy", daemon=True)
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None
        self._handling: set[asyncio.Task[Any]] = set()
        self.port = 0

    # ------------------------------------------------------------------ the test's side
    def start(self, kubeconfig: Path) -> ApiProxy:
        """Starts serving; writes a kubeconfig that points at the proxy to ``kubeconfig``."""
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(30)
        kubeconfig.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config",
            "clusters": [{"name": "proxy", "cluster": {"server": f"http://127.0.0.1:{self.port}"}}],
            "users": [{"name": "proxy", "user": {"token": "passed-on-by-the-proxy"}}],
            "contexts": [{"name": "proxy", "context": {"cluster": "proxy", "user": "proxy"}}],
            "current-context": "proxy"}))
        self.kubeconfig = kubeconfig
        return self

    def stop(self) -> None:
        if self._thread.is_alive():
            asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(30)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)

    def env(self) -> dict[str, str]:
        """An operator's environment for reaching the API server through this proxy."""
        return {"KUBECONFIG": str(self.kubeconfig), "K8S_AUTH_KUBECONFIG": str(self.kubeconfig)}

    def inject(self, fault: Fault) -> Fault:
        with self._lock:
            self.faults.append(fault)
        return fault

    def clear(self, fault: Fault) -> None:
        with self._lock:
            if fault in self.faults:
                self.faults.remove(fault)

    def seen(self, since: float = 0.0, writes_only: bool = False) -> list[Request]:
        with self._lock:
            return [r for r in self.requests if r.at >= since and (r.write or not writes_only)]

    # ------------------------------------------------------------------ the proxy
    async def _start(self) -> None:
        self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=self._tls, limit=0),
                                              timeout=aiohttp.ClientTimeout(total=None, sock_connect=10))
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def _stop(self) -> None:
        for task in list(self._handling):  # streams in flight (watches) never end by themselves
            task.cancel()
        await asyncio.gather(*self._handling, return_exceptions=True)
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()

    def _fault_for(self, method: str, path: str) -> Fault | None:
        with self._lock:
            for fault in self.faults:
                if fault.matches(method, path):
                    if fault.times is not None:
                        fault.times -= 1
                    return fault
        return None

    def _record(self, at: float, request: web.Request, status: int) -> None:
        with self._lock:
            self.requests.append(Request(at, request.method, request.path_qs, status))

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        task = asyncio.current_task()
        assert task is not None
        self._handling.add(task)
        try:
            return await self._pass(request)
        finally:
            self._handling.discard(task)

    async def _pass(self, request: web.Request) -> web.StreamResponse:
        at = time.time()
        fault = self._fault_for(request.method, request.path_qs)
        if fault is not None and fault.delay:
            await asyncio.sleep(fault.delay)
        if fault is not None and fault.status is not None:
            self._record(at, request, fault.status)
            return web.json_response({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                                      "message": fault.message, "reason": fault.reason, "code": fault.status},
                                     status=fault.status, headers=fault.headers)
        assert self._session is not None
        body = await request.read() if request.can_read_body else None
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP}
        headers.update(self._headers)
        status = 0
        try:
            async with self._session.request(request.method, self.upstream + request.path_qs, headers=headers,
                                             data=body) as upstream:
                status = upstream.status
                resp = web.StreamResponse(status=upstream.status, reason=upstream.reason)
                for k, v in upstream.headers.items():
                    if k.lower() not in HOP_BY_HOP:
                        resp.headers[k] = v
                await resp.prepare(request)
                async for chunk in upstream.content.iter_any():
                    await resp.write(chunk)
                await resp.write_eof()
                return resp
        finally:
            self._record(at, request, status)


def answers(requests: list[Request]) -> dict[str, Any]:
    """A short account of requests, for assertion messages."""
    return {f"{r.method} {r.path} -> {r.status}": time.strftime("%H:%M:%S", time.localtime(r.at)) for r in requests}
