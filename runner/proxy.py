"""The API proxy between roles and the API server (the Go ansible-operator's design).

Each run gets a kubeconfig that points at this proxy with a one-off token as its user name; the proxy
knows which object the run is for from the token, forwards every request with the operator's own
credentials, and on the way:

- links what a run creates to the run's object (``ownership.py``: an ownerReference, or the
  primary-resource annotations across namespaces and scopes), whatever module or tool the role uses, and
  nothing a run only changes; annotation-linked objects are recorded on their owner by UID at creation, for
  the runtime to delete with it;
- tells the dependent watcher about every kind it sees linked this way, so changes to those objects
  bring their owner back (also after a restart: the first run re-reads its dependents through here);
- remembers the resourceVersions its writes produced, so the role's own writes do not trigger runs.

WebSocket upgrades (exec, attach, port-forward: what kubernetes.core.k8s_exec uses) are passed through
message by message, as httputil.ReverseProxy passes them in the Go proxy.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import os
import secrets
import tempfile
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import aiohttp
from aiohttp import WSMsgType, hdrs, web

from .apisession import ApiSession, Fenced
from .config import GVK
from .kube import METADATA, ApiError
from .ownership import (
    APPLY_PATCH,
    Link,
    Owner,
    Target,
    decide,
    linked,
    needs_live_object,
    parse_body,
    with_link,
)

log = logging.getLogger(__name__)

HOP_BY_HOP = {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailers",
              "transfer-encoding", "upgrade", "host", "authorization", "content-length",
              # aiohttp decompresses upstream bodies itself; pass them on as plain bytes
              "accept-encoding", "content-encoding"}
NAMESPACE_SUBRESOURCES = {"status", "finalize"}
# Subresources the API server checks (authorization, the pod, the container) the same way with or without
# the upgrade, and never streams without it.
STREAM_SUBRESOURCES = {"exec", "attach", "portforward"}
# Events are records about objects, not parts of them: never owned, never watched as dependents.
NOT_DEPENDENTS = {("", "events"), ("events.k8s.io", "events")}
# The proxy's own requests and the roles' that do not stream: an answer that stops coming for this long is an
# error (the API server itself gives up on a request after 60 s).
UPSTREAM_TIMEOUT = aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=60)
STREAM_TIMEOUT = aiohttp.ClientTimeout(total=None, sock_connect=10)


@dataclass(frozen=True)
class RequestInfo:
    group: str
    version: str
    namespace: str | None
    resource: str
    name: str | None
    subresource: str | None


# Merge patches whose effect can be worked out here (server-side apply also moves field ownership).
NOOP_CHECKED_PATCHES = ("application/strategic-merge-patch+json", "application/merge-patch+json")


def patch_is_noop(patch: Any, current: Any) -> bool:
    """True when applying ``patch`` (a strategic or JSON merge patch) to ``current`` changes nothing: every
    value it sets is already there. Conservative: patch directives ($patch, $retainKeys, ...), nulls
    (deletions) and lists that are not exactly equal all count as changes."""
    if isinstance(patch, dict):
        if not isinstance(current, dict):
            return False
        return all(not k.startswith("$") and v is not None and k in current and patch_is_noop(v, current[k])
                   for k, v in patch.items())
    return patch == current


def parse_path(path: str) -> RequestInfo | None:
    """Kubernetes' RequestInfoFactory for resource requests: /api/v1/... and /apis/<g>/<v>/..."""
    parts = [p for p in path.split("/") if p]
    if len(parts) >= 3 and parts[0] == "api":
        group, version, rest = "", parts[1], parts[2:]
    elif len(parts) >= 4 and parts[0] == "apis":
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        return None
    namespace = None
    if rest[0] == "namespaces" and len(rest) >= 2:
        namespace = rest[1]
        if len(rest) > 2 and rest[2] not in NAMESPACE_SUBRESOURCES:
            rest = rest[2:]
        else:
            rest, namespace = ["namespaces", *rest[1:]], None
    resource = rest[0]
    name = rest[1] if len(rest) > 1 else None
    sub = rest[2] if len(rest) > 2 else None
    return RequestInfo(group, version, namespace, resource, name, sub)


class ResourceIndex:
    """Plural → the kind (and whether it is namespaced), from discovery, cached per group/version."""

    def __init__(self, api: ApiSession, timeout: aiohttp.ClientTimeout = UPSTREAM_TIMEOUT) -> None:
        self.api = api
        self.timeout = timeout
        self._cache: dict[tuple[str, str], dict[str, Target]] = {}

    async def lookup(self, group: str, version: str, plural: str) -> Target | None:
        """None when the API server serves no such resource; raises when it cannot be asked."""
        key = (group, version)
        if key not in self._cache or plural not in self._cache[key]:
            path = f"/apis/{group}/{version}" if group else f"/api/{version}"
            async with self.api.request("GET", path, timeout=self.timeout) as resp:
                if resp.status == 404:
                    return None
                if resp.status != 200:
                    raise aiohttp.ClientResponseError(resp.request_info, (), status=resp.status, message=resp.reason or "")
                listing = await resp.json()
            self._cache[key] = {r["name"]: Target(GVK(group, version, r["kind"]), r["name"], bool(r.get("namespaced")))
                                for r in listing.get("resources", []) if "/" not in r["name"]}
        return self._cache[key].get(plural)


ObjectKey = tuple[str, str, str, str]  # (group, plural, namespace, name)


class OwnWrites:
    """A bounded memory of resourceVersions produced by the roles' own writes, and of writes in flight:
    a watch event can arrive before the response of the write that caused it has been read."""

    def __init__(self, size: int = 20000) -> None:
        self._rvs: OrderedDict[str, None] = OrderedDict()
        self.size = size
        self._in_flight: dict[ObjectKey, int] = {}
        self._settled = asyncio.Condition()

    def add(self, rv: str) -> None:
        self._rvs[rv] = None
        while len(self._rvs) > self.size:
            self._rvs.popitem(last=False)

    def __contains__(self, rv: object) -> bool:
        return rv in self._rvs

    def begin(self, key: ObjectKey) -> None:
        self._in_flight[key] = self._in_flight.get(key, 0) + 1

    async def end(self, key: ObjectKey) -> None:
        left = self._in_flight.get(key, 1) - 1
        if left:
            self._in_flight[key] = left
        else:
            self._in_flight.pop(key, None)
        async with self._settled:
            self._settled.notify_all()

    def pending(self, key: ObjectKey) -> bool:
        return key in self._in_flight

    async def settled(self, key: ObjectKey, timeout: float = 10.0) -> None:
        async with self._settled:
            await asyncio.wait_for(self._settled.wait_for(lambda: key not in self._in_flight), timeout)


class DependentWatcher(Protocol):
    def seen(self, owner: Owner, target: Target, meta: dict[str, Any]) -> None:
        """An object linked to ``owner`` went through: watch its kind, remember it."""


class DependentRecords(Protocol):
    async def hold(self, owner: Owner) -> None:
        """``owner``'s run is about to create an annotation-linked object: the owner holds the cleanup's finalizer
        (raises when it cannot: the owner is being deleted, or gone)."""

    async def record(self, owner: Owner, target: Target, meta: dict[str, Any]) -> None:
        """``owner``'s run created this annotation-linked object: record it on the owner, by UID."""


class OwnerProxy:
    def __init__(self, api: ApiSession, inject_owner_ref: bool, watcher: DependentWatcher,
                 records: DependentRecords, own_writes: OwnWrites, kubeconfig_dir: Path | None = None,
                 port: int = 0, upstream_timeout: aiohttp.ClientTimeout = UPSTREAM_TIMEOUT) -> None:
        self.api = api
        self.inject = inject_owner_ref
        self.watcher = watcher
        self.records = records
        self.index = ResourceIndex(api, upstream_timeout)
        self.own_writes = own_writes
        self.upstream_timeout = upstream_timeout
        self._tokens: dict[str, Owner] = {}
        self._dir = kubeconfig_dir or Path(tempfile.mkdtemp(prefix="playbook-operator-kubeconfigs-"))
        self._dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._runner: web.AppRunner | None = None
        self._upgraded: set[web.WebSocketResponse] = set()
        self.port = port

    async def start(self) -> None:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        app.on_shutdown.append(self._end_upgrades)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        # By default an ephemeral port: upstream's fixed 8888 clashes when two operators share a host, and
        # only this operator's runs use the proxy (their kubeconfig names the port).
        site = web.TCPSite(self._runner, "127.0.0.1", self.port)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        log.info("API proxy for roles on 127.0.0.1:%d (owner references %s)", self.port,
                 "injected" if self.inject else "not injected")

    async def stop(self) -> None:
        if self._runner:
            await self._runner.cleanup()

    async def _end_upgrades(self, _app: web.Application) -> None:
        # A stream into a pod has no end of its own, and aiohttp waits for open handlers at shutdown (twice
        # its 60 s timeout): end them (1001, going away), which ends their upstream streams too.
        await asyncio.gather(*(ws.close(code=1001) for ws in list(self._upgraded)), return_exceptions=True)

    # ------------------------------------------------------------------ per-run credentials
    def kubeconfig_for(self, owner: Owner) -> tuple[str, Path]:
        token = secrets.token_urlsafe(24)
        self._tokens[token] = owner
        path = self._dir / f"{token}.yaml"
        cfg = {
            "apiVersion": "v1", "kind": "Config",
            "clusters": [{"name": "proxy", "cluster": {"server": f"http://127.0.0.1:{self.port}"}}],
            "users": [{"name": "run", "user": {"username": token, "password": "unused"}}],
            "contexts": [{"name": "run", "context": {"cluster": "proxy", "user": "run",
                                                      "namespace": owner.namespace or "default"}}],
            "current-context": "run",
        }
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            json.dump(cfg, fh)
        return token, path

    def release(self, token: str) -> None:
        self._tokens.pop(token, None)
        (self._dir / f"{token}.yaml").unlink(missing_ok=True)

    def _owner(self, request: web.Request) -> Owner | None:
        auth = request.headers.get("Authorization", "")
        if not auth.startswith("Basic "):
            return None
        try:
            user = base64.b64decode(auth[6:]).decode().split(":", 1)[0]
        except (ValueError, UnicodeDecodeError):
            return None
        return self._tokens.get(user)

    # ------------------------------------------------------------------ the proxy
    async def _handle(self, request: web.Request) -> web.StreamResponse:
        owner = self._owner(request)
        if owner is None:
            return web.json_response({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 401,
                                      "reason": "Unauthorized", "message": "unknown or expired run token"}, status=401)
        if request.headers.get(hdrs.UPGRADE, "").lower() == "websocket":
            # Streams into pods (subresources): nothing to own, no object write to remember.
            return await self._upgrade(request)
        body = await request.read() if request.can_read_body else None
        info = parse_path(request.path)
        linking = bool(body) and self.inject and owner.inject and request.method in ("POST", "PUT", "PATCH")
        target: Target | None = None
        if info is not None and info.subresource is None and (info.group, info.resource) not in NOT_DEPENDENTS:
            try:
                target = await self.index.lookup(info.group, info.version, info.resource)
            except (aiohttp.ClientError, TimeoutError) as exc:
                if linking:  # as the Go proxy: better no write than an object created without its owner
                    return _status(500, f"unable to determine the kind of {request.path} (discovery: {exc}): "
                                        "refusing to write it without its owner reference")
                log.debug("discovery for %s failed: %s", request.path, exc)
        link = None
        if linking and info is not None and target is not None and info.subresource is None:
            try:
                body, link = await self._link(request, info, target, owner, body or b"")
            except (aiohttp.ClientError, TimeoutError) as exc:
                return _status(500, f"unable to read {request.path} to decide its owner: {exc}")
        if link is Link.ANNOTATIONS and request.method in ("POST", "PATCH") and "dryRun" not in request.query:
            # (what it creates is recorded on the owner, which must hold the cleanup's finalizer first: an owner
            # being deleted takes none, and an object created then would be left behind)
            try:
                await self.records.hold(owner)
            except ApiError as exc:
                return _status(exc.status if exc.status in (404, 409) else 500,
                               f"not created: it would outlive its owner {owner.kind} {owner.namespace}/{owner.name}"
                               f", which could not hold the finalizer that deletes it ({exc})")
            except (aiohttp.ClientError, TimeoutError) as exc:
                return _status(500, f"not created: the owner {owner.kind} {owner.namespace}/{owner.name} could not "
                                    f"be given the finalizer that deletes it ({exc})")
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP}
        write_key = None
        if info is not None and info.name and request.method in ("PUT", "PATCH", "DELETE"):
            write_key = (info.group, info.resource, info.namespace or "", info.name)
            self.own_writes.begin(write_key)
        try:
            if request.method == "PATCH" and info is not None and target is not None and info.name \
                    and info.subresource is None and "dryRun" not in request.query:
                unchanged = await self._current_if_noop(request, body)
                if unchanged is not None:
                    await self._observe(request, info, target, owner, unchanged, 200, None)
                    return web.Response(status=200, body=unchanged, content_type="application/json")
            return await self._forward(request, info, target, owner, headers, body, link)
        finally:
            if write_key is not None:
                await self.own_writes.end(write_key)

    async def _link(self, request: web.Request, info: RequestInfo, target: Target, owner: Owner,
                    body: bytes) -> tuple[bytes, Link | None]:
        """The body with the link this write must carry (``ownership.decide``), and that link."""
        ctype = request.headers.get("Content-Type", "application/json").split(";")[0].strip()
        if request.method == "PATCH" and ctype != APPLY_PATCH:
            return body, None  # a merge, strategic or JSON patch changes an object: it never links it
        obj = parse_body(body)
        if obj is None:
            return body, None
        live = None
        if needs_live_object(request.method, ctype):
            live = await self._live_metadata(request.path)
        namespace = info.namespace or obj["metadata"].get("namespace") or ""
        link = decide(request.method, ctype, obj["metadata"], live, owner, target, namespace)
        if link is None:
            return body, None
        return json.dumps(with_link(obj, owner, link, live)).encode(), link

    async def _live_metadata(self, path: str) -> dict[str, Any] | None:
        """The object's metadata as it is now; None if it does not exist."""
        async with self.api.request("GET", path, headers={"Accept": METADATA}, timeout=self.upstream_timeout) as resp:
            if resp.status == 404:
                return None
            resp.raise_for_status()
            obj = await resp.json()
        meta = obj.get("metadata") if isinstance(obj, dict) else None
        return meta if isinstance(meta, dict) else {}

    async def _current_if_noop(self, request: web.Request, body: bytes | None) -> bytes | None:
        """The object as it is, when this merge patch cannot change it: then the write is not sent. A role
        that applies what is already there (kubernetes.core.k8s PATCHes on every run) costs the API server a
        read, not a write, so an idle resync writes nothing."""
        ctype = request.headers.get("Content-Type", "").split(";")[0].strip()
        if not body or ctype not in NOOP_CHECKED_PATCHES:
            return None
        try:
            patch = json.loads(body)
        except ValueError:
            return None
        async with self.api.request("GET", request.path, timeout=self.upstream_timeout) as upstream:
            if upstream.status != 200:
                return None
            data = await upstream.read()
        try:
            current = json.loads(data)
        except ValueError:
            return None
        return data if patch_is_noop(patch, current) else None

    async def _forward(self, request: web.Request, info: RequestInfo | None, target: Target | None, owner: Owner,
                       headers: dict[str, str], body: bytes | None, link: Link | None) -> web.StreamResponse:
        # A watch or a followed log streams as long as it lasts; any other answer that stalls is an error the
        # role should see, not a module (and its run, and its object's queue) waiting forever.
        timeout = STREAM_TIMEOUT if _streams(request) else self.upstream_timeout
        try:
            upstream = await self.api.request(request.method, request.path_qs, headers=headers, data=body,
                                              timeout=timeout)
        except Fenced:
            return _status(503, "this operator is no longer sure it leads: it writes nothing")
        except TimeoutError:
            return _status(504, f"the API server did not answer {request.method} {request.path} in time")
        except aiohttp.ClientError as exc:
            return _status(502, f"the API server could not be reached: {exc}")
        async with upstream:
            resp = web.StreamResponse(status=upstream.status, reason=upstream.reason)
            for k, v in upstream.headers.items():
                if k.lower() not in HOP_BY_HOP:
                    resp.headers[k] = v
            single = (info is not None and target is not None and info.subresource is None
                      and (info.name or request.method == "POST") and "watch" not in request.query)
            if single and upstream.status < 300:
                assert info is not None and target is not None
                try:
                    data = await upstream.read()
                except TimeoutError:
                    return _status(504, f"the API server's answer to {request.method} {request.path} stalled")
                # before the role has the answer: a run that ended has recorded what it created
                await self._observe(request, info, target, owner, data, upstream.status, link)
            try:
                await resp.prepare(request)
                if single and upstream.status < 300:
                    await resp.write(data)
                else:
                    async for chunk in upstream.content.iter_any():
                        await resp.write(chunk)
                await resp.write_eof()
            except (ConnectionResetError, aiohttp.ClientConnectionResetError):
                # the role went away (its run was stopped): nothing to answer, nothing wrong here
                log.debug("%s %s: the client went away", request.method, request.path)
            return resp

    async def _upgrade(self, request: web.Request) -> web.StreamResponse:
        if not self.api.fence():  # a command in a pod is a write as much as any
            return _status(503, "this operator is no longer sure it leads: it writes nothing")
        offered = [p.strip() for value in request.headers.getall(hdrs.SEC_WEBSOCKET_PROTOCOL, [])
                   for p in value.split(",") if p.strip()]
        try:
            # The session's connector carries the TLS settings; max_msg_size=0: the API server sets the limits.
            upstream = await self.api.session.ws_connect(self.api.base + request.path_qs, protocols=offered,
                                                         headers=self.api.auth_headers(), max_msg_size=0)
        except aiohttp.WSServerHandshakeError as exc:
            return await self._refused(request, exc.status)
        except aiohttp.ClientError as exc:
            return _status(502, f"API server unreachable for the upgrade: {exc}")
        async with upstream:
            # Accept the client only now, with the subprotocol the API server chose: the channel protocol
            # version (v4, v5, base64) decides how both ends frame their messages.
            client = web.WebSocketResponse(protocols=[upstream.protocol] if upstream.protocol else [],
                                           max_msg_size=0)
            await client.prepare(request)
            pumps = [asyncio.create_task(_pump(client, upstream)), asyncio.create_task(_pump(upstream, client))]
            self._upgraded.add(client)
            try:
                await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
            finally:
                self._upgraded.discard(client)
                # One side is done: the other direction has nothing left to carry.
                for pump in pumps:
                    pump.cancel()
                await asyncio.gather(*pumps, return_exceptions=True)
                await client.close(code=_sendable(upstream.close_code))
                await upstream.close(code=_sendable(client.close_code))
        return client

    async def _refused(self, request: web.Request, status: int) -> web.Response:
        """The API server's answer to a refused upgrade, so that the role sees why (RBAC, "pods x not found").
        aiohttp drops the body of a refused handshake; for exec, attach and port-forward the same request
        without the upgrade is refused the same way, so its answer is the explanation when the status agrees."""
        info = parse_path(request.path)
        if status >= 400 and info is not None and info.subresource in STREAM_SUBRESOURCES:
            try:
                async with self.api.request("GET", request.path_qs) as again:
                    if again.status == status:
                        return web.Response(status=status, body=await again.read(), headers={
                            hdrs.CONTENT_TYPE: again.headers.get(hdrs.CONTENT_TYPE, "application/json")})
            except aiohttp.ClientError as exc:
                log.debug("no explanation for the refused upgrade of %s: %s", request.path, exc)
        # A refusal that is no error (a 200 or a bad 101) means the API server cannot upgrade: a bad gateway.
        code = status if status >= 400 else 502
        return _status(code, f"the API server refused the upgrade of {request.path} ({status})")

    async def _observe(self, request: web.Request, info: RequestInfo, target: Target, owner: Owner, data: bytes,
                       status: int, link: Link | None) -> None:
        try:
            obj = json.loads(data)
        except ValueError:
            return
        meta = obj.get("metadata") if isinstance(obj, dict) else None
        if not isinstance(meta, dict):
            return
        write = request.method in ("POST", "PUT", "PATCH")
        if write and meta.get("resourceVersion"):
            self.own_writes.add(meta["resourceVersion"])
        if linked(meta, owner) is None:
            return
        self.watcher.seen(owner, target, meta if write else {})
        if link is Link.ANNOTATIONS and status == 201 and "dryRun" not in request.query:
            try:
                await self.records.record(owner, target, meta)
            except Exception as exc:  # the object exists; what cannot be recorded is left behind, as by Go
                log.warning("could not record %s %s/%s as a dependent of %s %s/%s: %s", target.gvk.kind,
                            meta.get("namespace") or "", meta.get("name"), owner.kind, owner.namespace, owner.name, exc)


async def _pump(src: web.WebSocketResponse | aiohttp.ClientWebSocketResponse,
                dst: web.WebSocketResponse | aiohttp.ClientWebSocketResponse) -> None:
    """Carry one direction of an upgraded connection until its sender closes (or fails)."""
    async for msg in src:
        if msg.type == WSMsgType.BINARY:
            await dst.send_bytes(msg.data)
        elif msg.type == WSMsgType.TEXT:
            await dst.send_str(msg.data)
        elif msg.type == WSMsgType.ERROR:
            return


def _streams(request: web.Request) -> bool:
    """A watch, or a log followed: answers that may be silent for long."""
    return request.query.get("watch", "false").lower() not in ("false", "0") \
        or request.query.get("follow", "false").lower() not in ("false", "0")


def _sendable(code: int | None) -> int:
    """The close code to pass on. 1005 (none given), 1006 (connection lost) and 1015 (TLS failure) only
    describe a closing and must not be sent (RFC 6455 7.4.1; websocket-client fails on them): a lost side
    becomes 1014, bad gateway."""
    if code is None or code == 1005:
        return 1000
    return 1014 if code in (1006, 1015) else code


def _status(code: int, message: str) -> web.Response:
    return web.json_response({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                              "code": code, "message": message}, status=code)
