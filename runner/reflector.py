"""List-and-watch of one kind in one scope (a namespace, or the whole cluster), as client-go's reflector does it.

A full list (page by page) hands every object to the sink and then ends it, so that the sink can tell what is
gone since the last list; then a watch from the list's resourceVersion hands it each event. A watch that ends
or breaks is resumed from the last resourceVersion seen (bookmarks included); one the API server no longer
can resume (410 Gone) is replaced by a new list. Every failure is retried, for as long as it takes: what the
API server says while it starts (429, "storage is (re)initializing"), outages and refusals are logged as
what they are, not as errors of the operator. A watch event is a line of JSON of any length.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Protocol

import aiohttp

from .apisession import ApiSession

log = logging.getLogger(__name__)

PAGE = 500
WATCH_SECONDS = 300  # the API server ends each watch after this; the client waits a little longer for it
READ_TIMEOUT = aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=WATCH_SECONDS + 30)
LIST_TIMEOUT = aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=60)
CHUNK = 64 * 1024
# A failure that has lasted this long is worth a WARNING even if it is of a kind that passes (an outage).
PERSISTENT = 60.0


class Sink(Protocol):
    """What a reflector feeds: a full list (begun, each object, ended), then watch events."""

    def relist_begin(self) -> None: ...

    def listed(self, obj: dict[str, Any]) -> None: ...

    def relist_end(self) -> None: ...

    def event(self, etype: str, obj: dict[str, Any]) -> None: ...


class Gone(Exception):
    """410: the resourceVersion is older than the API server keeps; only a new list will do."""


class ApiRefusal(Exception):
    def __init__(self, status: int, reason: str, message: str, retry_after: float | None = None) -> None:
        super().__init__(f"{status} {reason}: {message}" if message else f"{status} {reason}")
        self.status, self.reason, self.retry_after = status, reason, retry_after

    @property
    def needs_a_person(self) -> bool:
        """A refusal that does not pass by itself (RBAC, a kind no longer served)."""
        return self.status in (401, 403, 404)


async def _refusal(resp: aiohttp.ClientResponse) -> ApiRefusal:
    raw = await resp.read()
    try:
        answer = json.loads(raw)
    except ValueError:
        answer = {}
    answer = answer if isinstance(answer, dict) else {}
    retry = resp.headers.get("Retry-After")
    return ApiRefusal(resp.status, answer.get("reason") or resp.reason or "",
                      answer.get("message") or raw.decode(errors="replace")[:300],
                      float(retry) if retry and retry.isdigit() else None)


async def lines(resp: aiohttp.ClientResponse) -> AsyncIterator[bytes]:
    """The response's lines, however long (aiohttp's readline stops at 2 x its buffer, 512 KiB)."""
    pending = b""
    async for chunk in resp.content.iter_chunked(CHUNK):
        pending += chunk
        if b"\n" not in chunk:
            continue
        *complete, pending = pending.split(b"\n")
        for line in complete:
            if line.strip():
                yield line
    if pending.strip():
        yield pending


@dataclass
class Trouble:
    """How loudly to report a failing watch: the first failure of a spell once, its repeats quietly, a spell
    that lasts (or needs a person) as a WARNING, and the recovery once."""

    name: str
    since: float | None = None
    warned: bool = False

    def failed(self, exc: BaseException, retry_in: float) -> None:
        now = time.monotonic()
        first = self.since is None
        if first:
            self.since = now
        needs_a_person = isinstance(exc, ApiRefusal) and exc.needs_a_person
        lasting = now - (self.since or now) >= PERSISTENT
        what = f"watch of {self.name} interrupted ({exc or type(exc).__name__}); retrying in {retry_in:.1f}s"
        if (needs_a_person or lasting) and not self.warned:
            self.warned = True
            log.warning("%s%s", what, "" if first else f" (failing for {now - (self.since or now):.0f}s)")
        elif first:
            log.info("%s", what)
        else:
            log.debug("%s", what)

    def recovered(self) -> None:
        if self.since is not None:
            log.info("watch of %s resumed after %.0fs", self.name, time.monotonic() - self.since)
        self.since, self.warned = None, False


@dataclass
class Reflector:
    api: ApiSession
    path: str  # the collection: /api/v1/namespaces/x/configmaps, /apis/g/v/things
    sink: Sink
    name: str  # for logs: the kind, and its namespace if one
    list_accept: str = "application/json"
    watch_accept: str = "application/json"
    params: dict[str, str] = field(default_factory=dict)  # labelSelector, ...
    synced: asyncio.Event = field(default_factory=asyncio.Event)

    async def run(self) -> None:
        """Lists and watches until cancelled; ``synced`` is set once the first list has been handed over."""
        trouble = Trouble(self.name)
        backoff = 0.5
        rv: str | None = None
        while True:
            try:
                if rv is None:
                    rv = await self._relist()
                    self.synced.set()
                    trouble.recovered()
                rv = await self._watch(rv, trouble)
                backoff = 0.5
            except Gone:
                log.info("watch of %s expired (410 Gone): relisting", self.name)
                rv = None
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if isinstance(exc, ApiRefusal) and exc.status == 404:
                    rv = None  # the kind is not served (any more): a new list once it is
                delay = exc.retry_after if isinstance(exc, ApiRefusal) and exc.retry_after else backoff
                trouble.failed(exc, delay)
                await asyncio.sleep(delay)
                backoff = min(backoff * 2, 10.0)

    async def _relist(self) -> str:
        self.sink.relist_begin()
        token: str | None = None
        while True:
            params = {**self.params, "limit": str(PAGE)}
            if token:
                params["continue"] = token
            async with self.api.request("GET", self.path, params=params, headers={"Accept": self.list_accept},
                                        timeout=LIST_TIMEOUT) as resp:
                if resp.status == 410 and token:
                    token = None  # the list's snapshot expired between pages: start it again
                    self.sink.relist_begin()
                    continue
                if resp.status >= 300:
                    raise await _refusal(resp)
                page = await resp.json()
            for item in page.get("items") or []:
                self.sink.listed(item)
            meta = page.get("metadata") or {}
            token = meta.get("continue")
            if not token:
                self.sink.relist_end()
                return meta.get("resourceVersion") or ""

    async def _watch(self, rv: str, trouble: Trouble) -> str:
        params = {**self.params, "watch": "1", "resourceVersion": rv, "allowWatchBookmarks": "true",
                  "timeoutSeconds": str(WATCH_SECONDS)}
        async with self.api.request("GET", self.path, params=params, headers={"Accept": self.watch_accept},
                                    timeout=READ_TIMEOUT) as resp:
            if resp.status == 410:
                raise Gone()
            if resp.status >= 300:
                raise await _refusal(resp)
            trouble.recovered()
            async for line in lines(resp):
                event = json.loads(line)
                etype, obj = event.get("type"), event.get("object") or {}
                if etype == "ERROR":
                    if obj.get("code") == 410:
                        raise Gone()
                    raise ApiRefusal(int(obj.get("code") or 500), obj.get("reason") or "", obj.get("message") or "")
                rv = (obj.get("metadata") or {}).get("resourceVersion") or rv
                if etype != "BOOKMARK":
                    self.sink.event(etype, obj)
        return rv
