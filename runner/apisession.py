"""An aiohttp session to the API server with the operator's own credentials, for the owner-reference
proxy and the dependent watches (both stream, and both live on the event loop)."""

from __future__ import annotations

import ssl
from typing import Any

import aiohttp
from kubernetes import client


class ApiSession:
    def __init__(self, configuration: client.Configuration) -> None:
        self.cfg = configuration
        self.base = configuration.host.rstrip("/")
        self._session: aiohttp.ClientSession | None = None

    def _ssl(self) -> ssl.SSLContext | bool:
        if not self.base.startswith("https"):
            return False
        ctx = ssl.create_default_context(cafile=self.cfg.ssl_ca_cert) if self.cfg.ssl_ca_cert \
            else ssl.create_default_context()
        if not self.cfg.verify_ssl:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        if self.cfg.cert_file:
            ctx.load_cert_chain(self.cfg.cert_file, self.cfg.key_file)
        return ctx

    def auth_headers(self) -> dict[str, str]:
        # In-cluster tokens rotate; the client's refresh hook re-reads the mounted token when due.
        if getattr(self.cfg, "refresh_api_key_hook", None):
            self.cfg.refresh_api_key_hook(self.cfg)
        # The client's own view of its credentials (a bearer token under "BearerToken" in current clients,
        # "authorization" in older ones; basic auth), so that a token kubeconfig or the in-cluster
        # ServiceAccount is never sent anonymously.
        return {s["key"]: s["value"] for s in self.cfg.auth_settings().values()
                if s.get("in") == "header" and s.get("value")}

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(ssl=self._ssl(), limit=100)
            self._session = aiohttp.ClientSession(
                connector=connector, timeout=aiohttp.ClientTimeout(total=None, sock_connect=10))
        return self._session

    def request(self, method: str, path: str, **kwargs: Any) -> Any:
        headers = {**kwargs.pop("headers", {}), **self.auth_headers()}
        return self.session.request(method, self.base + path, headers=headers, **kwargs)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
