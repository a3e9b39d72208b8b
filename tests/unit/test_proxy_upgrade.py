"""The proxy passes WebSocket upgrades (exec, attach, port-forward), as the Go ansible-operator's proxy does:
the real kubernetes client (what kubernetes.core.k8s_exec uses) execs through it into a fake API server."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiohttp import WSMsgType, web
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.stream import stream, ws_client

from runner.apisession import ApiSession
from runner.config import GVK
from runner.kopf_without_client import kopf
from runner.ownership import Owner
from runner.proxy import OwnerProxy, OwnWrites

pytestmark = pytest.mark.timeout(60)

OPERATOR_TOKEN = "operator-token"
V4 = "v4.channel.k8s.io"
# kubernetes >= 34 offers v5 first (its CLOSE frame ends stdin); older clients offer v4 alone
CLIENT_OFFER = ["v5.channel.k8s.io", V4] if hasattr(ws_client, "V5_CHANNEL_PROTOCOL") else [V4]
STDIN, STDOUT, STDERR, ERROR = 0, 1, 2, 3
OWNER = Owner("example.com/v1", "Bench", "b", "ns", "uid-1", GVK("example.com", "v1", "Bench"))


def status(code: int, message: str) -> web.Response:
    return web.json_response({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                              "message": message, "code": code}, status=code)


@dataclass
class FakeApiServer:
    """pods/exec of a fake API server: the v4 channel protocol only, the operator's bearer token only."""

    authorizations: list[str | None] = field(default_factory=list)
    offered: list[str] = field(default_factory=list)
    stdin_closed: asyncio.Event = field(default_factory=asyncio.Event)

    async def exec(self, request: web.Request) -> web.StreamResponse:
        self.authorizations.append(request.headers.get("Authorization"))
        if request.headers.get("Authorization") != f"Bearer {OPERATOR_TOKEN}":
            return status(401, "Unauthorized")
        pod = request.match_info["pod"]
        if pod == "forbidden":
            return status(403, 'pods "forbidden" is forbidden: User "system:serviceaccount:op:op" cannot create '
                               'resource "pods/exec" in API group "" in the namespace "ns"')
        if pod == "missing":
            return status(404, 'pods "missing" not found')
        if request.headers.get("Upgrade", "").lower() != "websocket":
            return status(400, "Upgrade request required")
        if pod == "refuses-upgrades":  # refused only with the upgrade: the proxy cannot ask again for why
            return status(403, "no upgrades here")
        ws = web.WebSocketResponse(protocols=(V4,))
        self.offered = [p.strip() for p in request.headers.get("Sec-WebSocket-Protocol", "").split(",")]
        if ws.can_prepare(request).protocol != V4:
            return status(400, "v4.channel.k8s.io required")
        await ws.prepare(request)
        command = request.query.getall("command", [])
        if command[0] == "echo":
            await ws.send_bytes(bytes([STDOUT]) + " ".join(command[1:]).encode() + b"\n")
            await ws.send_bytes(bytes([STDERR]) + b"to stderr\n")
        elif command[0] == "cat":  # stdin back on stdout until the client goes
            async for msg in ws:
                data = msg.data.encode() if msg.type == WSMsgType.TEXT else msg.data
                if data[0] == STDIN:
                    await ws.send_bytes(bytes([STDOUT]) + data[1:])
            self.stdin_closed.set()
            return ws
        elif command[0] == "vanish":  # the connection to the API server breaks mid-stream
            await ws.send_bytes(bytes([STDOUT]) + b"partial\n")
            assert request.transport is not None
            request.transport.abort()
            return ws
        await ws.send_bytes(bytes([ERROR]) + json.dumps({"metadata": {}, "status": "Success"}).encode())
        await ws.close()
        return ws


@dataclass
class Harness:
    proxy: OwnerProxy
    upstream: FakeApiServer
    kubeconfig: Path
    token: str
    dependents: list[Any]


@dataclass
class Seen:
    """The proxy's dependent watcher and records, as a list of what they were told."""

    told: list[Any]

    def seen(self, *args: Any) -> None:
        self.told.append(("seen", *args))

    async def hold(self, *args: Any) -> None:
        self.told.append(("hold", *args))

    async def record(self, *args: Any) -> None:
        self.told.append(("record", *args))


@asynccontextmanager
async def harness(tmp_path: Path) -> AsyncIterator[Harness]:
    fake = FakeApiServer()
    app = web.Application()
    app.router.add_get("/api/v1/namespaces/{ns}/pods/{pod}/exec", fake.exec)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    api = ApiSession(kopf.ConnectionInfo(server=f"http://127.0.0.1:{port}", token=OPERATOR_TOKEN))
    dependents: list[Any] = []
    proxy = OwnerProxy(api, True, Seen(dependents), Seen(dependents), OwnWrites(),
                       kubeconfig_dir=tmp_path / "kubeconfigs")
    await proxy.start()
    token, kubeconfig = proxy.kubeconfig_for(OWNER)
    try:
        yield Harness(proxy, fake, kubeconfig, token, dependents)
    finally:
        await proxy.stop()
        await api.close()
        await runner.cleanup()


def core_api(kubeconfig: Path) -> client.CoreV1Api:
    cfg = client.Configuration()
    config.load_kube_config(config_file=str(kubeconfig), client_configuration=cfg)
    return client.CoreV1Api(client.ApiClient(cfg))


def exec_through(kubeconfig: Path, pod: str, command: list[str]) -> str:
    """What kubernetes.core.k8s_exec does (preloaded: returns when the API server closes the stream)."""
    return stream(core_api(kubeconfig).connect_get_namespaced_pod_exec, pod, "ns", command=command,
                  stderr=True, stdin=False, stdout=True, tty=False)


def cat_through(kubeconfig: Path) -> tuple[str | None, str]:
    resp = stream(core_api(kubeconfig).connect_get_namespaced_pod_exec, "p", "ns", command=["cat"],
                  stderr=True, stdin=True, stdout=True, tty=False, _preload_content=False)
    try:
        resp.write_stdin("ping\n")
        resp.write_stdin(b"pong\n")
        lines = [resp.readline_stdout(timeout=10), resp.readline_stdout(timeout=10)]
        # kubernetes < 34 offers v4 only and does not record the choice
        return getattr(resp, "subprotocol", V4), "|".join(line or "" for line in lines)
    finally:
        resp.close()


async def others_done(timeout: float = 10.0) -> list[asyncio.Task[Any]]:
    """The tasks still running besides this one (none, once both connections have ended: no pump is left)."""
    others: list[asyncio.Task[Any]] = []
    for _ in range(int(timeout / 0.05)):
        others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        if not others:
            break
        await asyncio.sleep(0.05)
    return others


def test_exec_output_arrives_through_the_proxy(tmp_path: Path) -> None:
    async def go() -> tuple[str, Harness, list[asyncio.Task[Any]]]:
        async with harness(tmp_path) as h:
            out = await asyncio.to_thread(exec_through, h.kubeconfig, "p", ["echo", "hi"])
            return out, h, await others_done()

    out, h, left = asyncio.run(go())
    assert out == "hi\nto stderr\n"
    # The run's basic-auth token was accepted by the proxy and never reached the API server: the operator's did.
    assert h.upstream.authorizations == [f"Bearer {OPERATOR_TOKEN}"]
    assert h.upstream.offered == CLIENT_OFFER  # the client's offer, passed on as it is
    assert left == []
    assert h.dependents == [] and len(h.proxy.own_writes._rvs) == 0  # a subresource: nothing owned, no write


def test_a_command_arrives_as_the_role_gave_it(tmp_path: Path) -> None:
    async def go() -> str:
        async with harness(tmp_path) as h:
            return await asyncio.to_thread(exec_through, h.kubeconfig, "p", ["echo", "a && b=c+d", "%41?#", "ü"])

    assert asyncio.run(go()).startswith("a && b=c+d %41?# ü\n")


def test_a_lost_api_server_ends_the_stream(tmp_path: Path) -> None:
    async def go() -> tuple[str, list[asyncio.Task[Any]]]:
        async with harness(tmp_path) as h:
            out = await asyncio.to_thread(exec_through, h.kubeconfig, "p", ["vanish"])
            return out, await others_done()

    out, left = asyncio.run(go())
    assert out == "partial\n"  # what came before, then an end the client accepts (not a hang, not an error)
    assert left == []


def test_stdin_reaches_the_pod_and_closing_the_client_closes_upstream(tmp_path: Path) -> None:
    async def go() -> tuple[tuple[str | None, str], list[asyncio.Task[Any]]]:
        async with harness(tmp_path) as h:
            got = await asyncio.to_thread(cat_through, h.kubeconfig)
            await asyncio.wait_for(h.upstream.stdin_closed.wait(), 10)
            return got, await others_done()

    (subprotocol, lines), left = asyncio.run(go())
    assert subprotocol == V4  # the proxy accepted the client with the API server's choice
    assert lines == "ping|pong"  # text and binary frames alike
    assert left == []


def test_stopping_the_proxy_ends_open_streams(tmp_path: Path) -> None:
    """A stream into a pod has no end of its own: stopping must not wait for one (aiohttp would, 2 minutes)."""
    def open_cat(kubeconfig: Path) -> Any:
        resp = stream(core_api(kubeconfig).connect_get_namespaced_pod_exec, "p", "ns", command=["cat"],
                      stderr=True, stdin=True, stdout=True, tty=False, _preload_content=False)
        resp.write_stdin("ping\n")
        assert resp.readline_stdout(timeout=10) == "ping"
        return resp

    def until_closed(resp: Any) -> bool:
        resp.run_forever(timeout=20)
        return resp.is_open()

    async def go() -> tuple[float, bool, bool]:
        async with harness(tmp_path) as h:
            resp = await asyncio.to_thread(open_cat, h.kubeconfig)
            closed = asyncio.create_task(asyncio.to_thread(until_closed, resp))
            start = time.monotonic()
            await h.proxy.stop()
            took = time.monotonic() - start
            still_open = await closed
            await asyncio.wait_for(h.upstream.stdin_closed.wait(), 10)
            return took, still_open, h.upstream.stdin_closed.is_set()

    took, still_open, upstream_closed = asyncio.run(go())
    assert took < 5 and not still_open and upstream_closed


def test_an_unknown_token_is_refused(tmp_path: Path) -> None:
    async def go() -> tuple[BaseException | None, Harness]:
        async with harness(tmp_path) as h:
            stale = tmp_path / "stale.yaml"
            stale.write_text(h.kubeconfig.read_text())
            h.proxy.release(h.token)  # the run is over
            try:
                await asyncio.to_thread(exec_through, stale, "p", ["echo", "hi"])
            except ApiException as exc:
                return exc, h
            return None, h

    exc, h = asyncio.run(go())
    assert exc is not None
    # The client reports a refused handshake as status 0, the HTTP status and body in the reason.
    assert "Handshake status 401" in str(exc) and "unknown or expired run token" in str(exc)
    assert h.upstream.authorizations == []


@pytest.mark.parametrize(("pod", "code", "message"), [
    ("forbidden", 403, 'cannot create resource \\"pods/exec\\"'),
    ("missing", 404, 'pods \\"missing\\" not found'),
    ("refuses-upgrades", 403, "the API server refused the upgrade"),
])
def test_a_refusal_reaches_the_role_with_its_reason(tmp_path: Path, pod: str, code: int, message: str) -> None:
    async def go() -> BaseException | None:
        async with harness(tmp_path) as h:
            try:
                await asyncio.to_thread(exec_through, h.kubeconfig, pod, ["echo", "hi"])
            except ApiException as exc:
                return exc
            return None

    exc = asyncio.run(go())
    assert exc is not None
    assert f"Handshake status {code}" in str(exc)
    assert message in str(exc)
