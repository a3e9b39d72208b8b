"""The operator's HTTP endpoints: /healthz and /readyz on the probe address, /metrics on the metrics one
(over HTTPS with --metrics-secure, for allowed tokens only with --metrics-require-rbac)."""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import logging
import ssl
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from . import metrics

if TYPE_CHECKING:
    from .kube import Kube

log = logging.getLogger(__name__)


def parse_bind(address: str) -> tuple[str, int] | None:
    """":8080" → all interfaces; "127.0.0.1:0" → a free port; "0" or "" → disabled (controller-runtime's rules)."""
    if address in ("", "0"):
        return None
    host, _, port = address.rpartition(":")
    return (host or "0.0.0.0", int(port))


def self_signed_context() -> ssl.SSLContext:
    """What controller-runtime serves metrics with when given no certificate: a key and a self-signed
    certificate made at start-up, for localhost. Scrapers of such an endpoint skip verification."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "playbook-operator-metrics")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=365))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"),
                                                        x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .sign(key, hashes.SHA256()))
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    with tempfile.TemporaryDirectory() as d:  # ssl loads a chain from files only; gone once loaded
        pem = Path(d) / "tls.pem"
        pem.write_bytes(cert.public_bytes(serialization.Encoding.PEM) + key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
        ctx.load_cert_chain(pem)
    return ctx


@dataclass
class MetricsSecurity:
    """--metrics-secure and --metrics-require-rbac, as controller-runtime's metrics server applies them:
    the caller's bearer token is checked with a TokenReview, then its user may GET the non-resource URL
    /metrics by a SubjectAccessReview (the operator's account needs create on both). Answers are kept for
    a minute per token, so that a scrape every few seconds is not two API requests each."""

    secure: bool = False
    reviewer: Kube | None = None
    ttl: float = 60.0
    _seen: dict[str, tuple[float, int, str]] = field(default_factory=dict)
    # Tokens nobody sent before each cost a TokenReview: at most this many answers kept, and this many reviews
    # at once, so that a flood of made-up tokens costs the API server and this process little.
    max_seen: int = 1024
    _reviewing: asyncio.Semaphore = field(default_factory=lambda: asyncio.Semaphore(4))

    async def check(self, request: web.Request) -> web.Response | None:
        if self.reviewer is None:
            return None
        auth = request.headers.get("Authorization", "")
        if not auth.startswith("Bearer ") or not auth[7:].strip():
            return web.Response(status=401, text="Unauthorized")
        token = auth[7:].strip()
        now = time.monotonic()
        seen = self._seen.get(token)
        if seen is None or seen[0] < now:
            async with self._reviewing:
                status, reason = await self._review(self.reviewer, token)
            self._seen = {k: v for k, v in self._seen.items() if v[0] >= now}
            while len(self._seen) >= self.max_seen:
                del self._seen[next(iter(self._seen))]  # the oldest answer
            seen = self._seen[token] = (now + self.ttl, status, reason)
        return None if seen[1] == 200 else web.Response(status=seen[1], text=seen[2])

    @staticmethod
    async def _review(kube: Kube, token: str) -> tuple[int, str]:
        review = await kube.request("POST", "/apis/authentication.k8s.io/v1/tokenreviews",
                                 {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
                                  "spec": {"token": token}})
        user = (review.get("status") or {}).get("user") or {}
        if not (review.get("status") or {}).get("authenticated"):
            return 401, "Unauthorized"
        access = await kube.request("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews",
                                 {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
                                  "spec": {"user": user.get("username", ""), "uid": user.get("uid", ""),
                                           "groups": user.get("groups", []), "extra": user.get("extra", {}),
                                           "nonResourceAttributes": {"path": "/metrics", "verb": "get"}}})
        if (access.get("status") or {}).get("allowed"):
            return 200, ""
        return 403, f"Forbidden (user={user.get('username', '')}, verb=get, resource=, subresource=)"


class Endpoints:
    def __init__(self, health_address: str, metrics_address: str, ready: Callable[[], bool],
                 security: MetricsSecurity | None = None) -> None:
        self.health_address, self.metrics_address, self.ready = health_address, metrics_address, ready
        self.security = security or MetricsSecurity()
        self._runners: list[web.AppRunner] = []
        self.ports: dict[str, int] = {}

    async def _healthz(self, _: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def _readyz(self, _: web.Request) -> web.Response:
        if self.ready():
            return web.Response(text="ok")
        return web.Response(status=503, text="not ready: watches not established yet, or shutting down")

    async def _metrics(self, request: web.Request) -> web.Response:
        refused = await self.security.check(request)
        if refused is not None:
            return refused
        body = generate_latest(metrics.registry())
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def _serve(self, name: str, address: str, routes: list[web.RouteDef],
                     tls: ssl.SSLContext | None = None) -> None:
        bind = parse_bind(address)
        if bind is None:
            return
        app = web.Application()
        app.add_routes(routes)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, bind[0], bind[1], reuse_address=True, ssl_context=tls)
        await site.start()
        self._runners.append(runner)
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.ports[name] = port
        log.info("serving %s on %s:%d%s", name, bind[0], port, " (https)" if tls else "")

    async def start(self) -> None:
        hb, mb = parse_bind(self.health_address), parse_bind(self.metrics_address)
        guarded = self.security.secure or self.security.reviewer is not None
        same = hb is not None and hb == mb and hb[1] != 0 and not guarded
        health = [web.get("/healthz", self._healthz), web.get("/readyz", self._readyz)]
        mroutes = [web.get("/metrics", self._metrics)]
        await self._serve("health probes", self.health_address, health + (mroutes if same else []))
        if not same:
            await self._serve("metrics", self.metrics_address, mroutes,
                              self_signed_context() if self.security.secure else None)

    async def stop(self) -> None:
        for r in self._runners:
            await r.cleanup()
