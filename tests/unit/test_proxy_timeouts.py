"""The proxy's upstream requests have a read timeout (a stalled answer is an error the role sees), except
the ones that stream: watches and followed logs. A write whose owner cannot be worked out is not sent."""

from __future__ import annotations

import asyncio
import base64
import time
from pathlib import Path

import aiohttp
from aiohttp import web

from runner.apisession import ApiSession
from runner.config import GVK
from runner.kopf_without_client import kopf
from runner.ownership import Owner
from runner.proxy import OwnerProxy, OwnWrites

OWNER = Owner("example.com/v1", "Widget", "w", "ns", "uid-w", GVK("example.com", "v1", "Widget"))
DISCOVERY = {"kind": "APIResourceList", "groupVersion": "v1",
             "resources": [{"name": "configmaps", "kind": "ConfigMap", "namespaced": True}]}


class Quiet:
    def seen(self, *_: object) -> None:
        pass

    async def hold(self, *_: object) -> None:
        pass

    async def record(self, *_: object) -> None:
        pass


async def discovery(_: web.Request) -> web.Response:
    return web.json_response(DISCOVERY)


async def hang(_: web.Request) -> web.Response:
    await asyncio.sleep(3600)
    return web.Response()


async def configmaps(request: web.Request) -> web.StreamResponse:
    if request.query.get("watch") != "1":
        return await hang(request)
    resp = web.StreamResponse()
    await resp.prepare(request)
    await asyncio.sleep(1.5)  # a quiet watch, longer than the read timeout
    await resp.write(b'{"type":"BOOKMARK","object":{"metadata":{"resourceVersion":"7"}}}\n')
    await resp.write_eof()
    return resp


created: list[str] = []


async def create(request: web.Request) -> web.Response:
    created.append(request.path)
    return web.json_response({}, status=201)


async def through_proxy(tmp_path: Path) -> tuple[tuple[int, float], tuple[int, bytes], int]:
    app = web.Application()
    app.router.add_get("/api/v1", discovery)
    app.router.add_get("/apis/stalled.example.com/v1", hang)  # its discovery never answers
    app.router.add_post("/apis/stalled.example.com/v1/namespaces/ns/things", create)
    app.router.add_get("/api/v1/namespaces/ns/configmaps/stalled", hang)
    app.router.add_get("/api/v1/namespaces/ns/configmaps", configmaps)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)  # the stalled handler never ends
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    api = ApiSession(kopf.ConnectionInfo(server=f"http://127.0.0.1:{port}", token="operator"))
    proxy = OwnerProxy(api, True, Quiet(), Quiet(), OwnWrites(), kubeconfig_dir=tmp_path,
                       upstream_timeout=aiohttp.ClientTimeout(total=None, sock_connect=5, sock_read=0.5))
    await proxy.start()
    token, _ = proxy.kubeconfig_for(OWNER)
    auth = {"Authorization": "Basic " + base64.b64encode(f"{token}:unused".encode()).decode()}
    base = f"http://127.0.0.1:{proxy.port}/api/v1/namespaces/ns/configmaps"
    try:
        async with aiohttp.ClientSession() as client:
            started = time.monotonic()
            async with client.get(f"{base}/stalled", headers=auth) as resp:
                stalled = (resp.status, time.monotonic() - started)
            async with client.get(f"{base}?watch=1", headers=auth) as resp:
                watched = (resp.status, await resp.read())
            async with client.post(f"http://127.0.0.1:{proxy.port}/apis/stalled.example.com/v1/namespaces/ns/things",
                                   headers=auth, json={"apiVersion": "stalled.example.com/v1", "kind": "Thing",
                                                       "metadata": {"name": "t"}}) as resp:
                unknown_kind = resp.status
    finally:
        await proxy.stop()
        await api.close()
        await runner.cleanup()
    return stalled, watched, unknown_kind


def test_a_stalled_answer_is_a_504_and_a_quiet_watch_is_not(tmp_path: Path) -> None:
    stalled, watched, unknown_kind = asyncio.run(asyncio.wait_for(through_proxy(tmp_path), 30))
    assert stalled[0] == 504 and stalled[1] < 5
    assert watched == (200, b'{"type":"BOOKMARK","object":{"metadata":{"resourceVersion":"7"}}}\n')
    # as the Go proxy: a create that might need an owner reference, whose kind discovery cannot tell, is refused
    assert unknown_kind == 500 and created == []
