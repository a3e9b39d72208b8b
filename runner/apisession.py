"""The operator's one way to the API server: credentials read by kopf's login functions, and one aiohttp
session with them.

The watches of the primary and dependent kinds (``reflector.py``), the runtime's own requests (``kube.Kube``)
and the owner-reference proxy all go through the ``ApiSession``, on the event loop.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import logging
import os
import ssl
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from . import metrics
from .kopf_without_client import kopf

log = logging.getLogger(__name__)

SERVICE_ACCOUNT_TOKEN = "/var/run/secrets/kubernetes.io/serviceaccount/token"
# As client-go re-reads a projected service-account token (kubelet rotates it long before it expires).
REFRESH_SECONDS = 60.0


def _has_credentials(info: kopf.ConnectionInfo) -> bool:
    return bool(info.token or info.scheme or (info.username and info.password)
                or info.certificate_path or info.certificate_data)


def _kubeconfig_dir() -> Path | None:
    for path in (os.environ.get("KUBECONFIG") or "~/.kube/config").split(os.pathsep):
        if path.strip() and (p := Path(path.strip()).expanduser()).exists():
            return p.resolve().parent
    return None


def _resolve_paths(info: kopf.ConnectionInfo) -> kopf.ConnectionInfo:
    """kubectl reads a kubeconfig's relative file names relative to the kubeconfig; kopf's reader relative to
    the working directory. Taken relative to the (first) kubeconfig's directory, as kubectl would."""
    base = _kubeconfig_dir()
    changes = {field: str(base / value) for field in ("ca_path", "certificate_path", "private_key_path")
               if base and isinstance(value := getattr(info, field), str) and not os.path.isabs(value)}
    return dataclasses.replace(info, **changes) if changes else info


def load_connection(settings: kopf.OperatorSettings | None = None) -> kopf.ConnectionInfo:
    """The service account's credentials in a pod, else the kubeconfig's (KUBECONFIG or ~/.kube/config).

    kopf's own readers cover tokens, basic auth and client certificates. A kubeconfig whose user has none
    of them (an ``exec`` or auth-provider plugin, as cloud clusters use) is read by the kubernetes client.
    """
    settings = settings or kopf.OperatorSettings()
    host, port = os.environ.get("KUBERNETES_SERVICE_HOST"), os.environ.get("KUBERNETES_SERVICE_PORT")
    if host and port and os.path.exists(SERVICE_ACCOUNT_TOKEN):  # in a pod, as client-go decides it
        info = kopf.login_with_service_account(settings=settings)
        if info is not None:  # the service's address, as client-go's in-cluster config: no DNS needed
            info = dataclasses.replace(info, server=f"https://{f'[{host}]' if ':' in host else host}:{port}")
    else:
        try:
            info = kopf.login_with_kubeconfig(settings=settings)
        except (OSError, KeyError, ValueError, yaml.YAMLError) as exc:  # no file; no such context, cluster, user; not YAML
            where = os.environ.get("KUBECONFIG") or "~/.kube/config"
            raise kopf.LoginError(f"could not read the kubeconfig {where}: {type(exc).__name__}: {exc}") from exc
        if info is not None:
            info = _resolve_paths(info)
            if not _has_credentials(info):
                info = kopf.login_via_client(logger=log, settings=settings) or info
    if info is None:
        raise kopf.LoginError("no credentials for the API server: not in a pod with a service account, and "
                              "no kubeconfig (set KUBECONFIG, or write ~/.kube/config)")
    return info


class Fenced(aiohttp.ClientError):
    """A write refused before it left: this operator is not sure it leads (its lease may be someone else's)."""


_WRITE = "write"  # a request's trace context: the fence applies to it
READS = frozenset({"GET", "HEAD", "OPTIONS"})


def _host(url: Any) -> str:
    """host[:port] as client-go's rest_client metrics label it (the base URL's Host)."""
    host = f"[{url.raw_host}]" if ":" in (url.raw_host or "") else (url.raw_host or "none")
    return f"{host}:{url.explicit_port}" if url.explicit_port else host


async def _count_answer(_session: aiohttp.ClientSession, _context: Any, params: aiohttp.TraceRequestEndParams) -> None:
    metrics.REST_CLIENT_REQUESTS.labels(str(params.response.status), params.method.upper(), _host(params.url)).inc()


async def _count_error(_session: aiohttp.ClientSession, _context: Any,
                       params: aiohttp.TraceRequestExceptionParams) -> None:
    if not isinstance(params.exception, Fenced):  # never sent
        metrics.REST_CLIENT_REQUESTS.labels("<error>", params.method.upper(), _host(params.url)).inc()


class ApiSession:
    def __init__(self, connection: kopf.ConnectionInfo,
                 reload: Callable[[], kopf.ConnectionInfo] | None = None) -> None:
        self.connection = connection
        self.base = connection.server.rstrip("/")
        self._reload = reload
        self._session: aiohttp.ClientSession | None = None
        self._refresher: asyncio.Task[None] | None = None
        # Whether writes may go out: with leader election, only while the lease is surely ours. Checked when a
        # write has its connection, the last moment before it is sent, so that a process that was stopped
        # (SIGSTOP, a paused VM, CPU starvation) sends nothing it queued before.
        self.fence: Callable[[], bool] = lambda: True

    @classmethod
    def from_environment(cls, settings: kopf.OperatorSettings | None = None) -> ApiSession:
        def reload() -> kopf.ConnectionInfo:
            return load_connection(settings)

        return cls(reload(), reload)

    def auth_headers(self) -> dict[str, str]:
        return self.connection.as_http_headers()

    def start(self) -> None:
        """Keeps rotating credentials fresh: a service account's token file, or a plugin's token before it
        expires."""
        in_pod = self.connection.token is not None and os.path.exists(SERVICE_ACCOUNT_TOKEN)
        if self._reload is not None and self._refresher is None and (self.connection.expiration is not None or in_pod):
            self._refresher = asyncio.create_task(self._refresh(), name="credentials-refresh")

    async def _refresh(self) -> None:
        assert self._reload is not None
        while True:
            delay = REFRESH_SECONDS
            if (expires := self.connection.expiration) is not None:
                aware = expires if expires.tzinfo else expires.replace(tzinfo=dt.UTC)  # kopf: naive means UTC
                delay = max(1.0, min(delay, (aware - dt.datetime.now(dt.UTC)).total_seconds() - 60))
            await asyncio.sleep(delay)
            try:
                self.connection = await asyncio.to_thread(self._reload)
            except Exception as exc:  # the old credentials may still do; the next attempt comes soon
                log.warning("could not refresh the API server credentials: %s", exc)

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            tls: ssl.SSLContext | bool = self.connection.as_ssl_context() if self.base.startswith("https") else False
            # No connection limit: the proxy's streams (watches, exec) must never hold up a status write.
            trace = aiohttp.TraceConfig()
            trace.on_connection_reuseconn.append(self._check_fence)
            trace.on_connection_create_end.append(self._check_fence)
            trace.on_request_end.append(_count_answer)
            trace.on_request_exception.append(_count_error)
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(ssl=tls, limit=0),
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=10), trace_configs=[trace])
        return self._session

    async def _check_fence(self, _session: aiohttp.ClientSession, context: Any, _params: Any) -> None:
        if context.trace_request_ctx == _WRITE and not self.fence():
            raise Fenced("not sure this operator leads: no writes")

    def request(self, method: str, path: str, *, fenced: bool = True, **kwargs: Any) -> Any:
        """A request with the operator's credentials. Writes are fenced (``fence``) unless ``fenced`` is false:
        the lease's own, and reviews that change nothing."""
        headers = {**kwargs.pop("headers", {}), **self.auth_headers()}
        context = _WRITE if fenced and method.upper() not in READS else None
        return self.session.request(method, self.base + path, headers=headers, trace_request_ctx=context, **kwargs)

    async def close(self) -> None:
        if self._refresher is not None:
            self._refresher.cancel()
            await asyncio.gather(self._refresher, return_exceptions=True)
        if self._session is not None:
            await self._session.close()
