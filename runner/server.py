"""The operator's HTTP endpoints: /healthz and /readyz on the probe address, /metrics on the metrics one."""

from __future__ import annotations

import logging
from collections.abc import Callable

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from . import metrics

log = logging.getLogger(__name__)


def parse_bind(address: str) -> tuple[str, int] | None:
    """":8080" → all interfaces; "127.0.0.1:0" → a free port; "0" or "" → disabled (controller-runtime's rules)."""
    if address in ("", "0"):
        return None
    host, _, port = address.rpartition(":")
    return (host or "0.0.0.0", int(port))


class Endpoints:
    def __init__(self, health_address: str, metrics_address: str, ready: Callable[[], bool]) -> None:
        self.health_address, self.metrics_address, self.ready = health_address, metrics_address, ready
        self._runners: list[web.AppRunner] = []
        self.ports: dict[str, int] = {}

    async def _healthz(self, _: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def _readyz(self, _: web.Request) -> web.Response:
        if self.ready():
            return web.Response(text="ok")
        return web.Response(status=503, text="not ready: watches not established yet, or shutting down")

    async def _metrics(self, _: web.Request) -> web.Response:
        body = generate_latest(metrics.registry())
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def _serve(self, name: str, address: str, routes: list[web.RouteDef]) -> None:
        bind = parse_bind(address)
        if bind is None:
            return
        app = web.Application()
        app.add_routes(routes)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, bind[0], bind[1], reuse_address=True)
        await site.start()
        self._runners.append(runner)
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.ports[name] = port
        log.info("serving %s on %s:%d", name, bind[0], port)

    async def start(self) -> None:
        hb, mb = parse_bind(self.health_address), parse_bind(self.metrics_address)
        same = hb is not None and hb == mb and hb[1] != 0
        health = [web.get("/healthz", self._healthz), web.get("/readyz", self._readyz)]
        mroutes = [web.get("/metrics", self._metrics)]
        await self._serve("health probes", self.health_address, health + (mroutes if same else []))
        if not same:
            await self._serve("metrics", self.metrics_address, mroutes)

    async def stop(self) -> None:
        for r in self._runners:
            await r.cleanup()
