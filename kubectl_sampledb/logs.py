"""The servers' logs together, each line prefixed with its pod: merged by time, or followed as they come.

The API's timestamps (timestamps=true) order the lines of different pods and let a follower that reconnects
(a restarted container, a pod replaced by a failover) skip what it has already printed.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TextIO

from .errors import CliError, NotAServer, NotFound
from .kube import Cluster

REFRESH_PODS_SECONDS = 5.0
RECONNECT_SECONDS = 2.0


@dataclass(frozen=True)
class Line:
    key: tuple[str, str]  # the timestamp, sortable (seconds, nanoseconds padded)
    pod: str
    text: str


def split_timestamp(raw: str) -> tuple[tuple[str, str], str]:
    """'2026-11-24T12:00:03.5Z text' → (('2026-11-24T12:00:03', '500000000'), 'text'). RFC3339Nano drops
    trailing zeros, so the fraction is padded before comparing."""
    stamp, sep, text = raw.partition(" ")
    if not sep or not stamp.endswith("Z") or "T" not in stamp:
        return ("", ""), raw
    seconds, _, fraction = stamp[:-1].partition(".")
    return (seconds, fraction.ljust(9, "0")), text


def prefixed(pod: str, text: str) -> str:
    return f"[{pod}] {text}"


def print_logs(cluster: Cluster, name: str, out: TextIO, err: TextIO, tail: int | None = None,
               server: str | None = None) -> None:
    lines: list[Line] = []
    for pod in _pods(cluster, name, server):
        try:
            text = cluster.pod_log(pod, timestamps=True, **({"tail_lines": tail} if tail is not None else {}))
        except CliError as exc:
            print(f"{pod}: no log: {exc}", file=err, flush=True)
            continue
        for raw in (text or "").splitlines():
            key, body = split_timestamp(raw)
            lines.append(Line(key, pod, body))
    for line in sorted(lines, key=lambda ln: ln.key):  # stable: one pod's lines keep their order
        print(prefixed(line.pod, line.text), file=out)
    out.flush()


def follow_logs(cluster: Cluster, name: str, out: TextIO, err: TextIO, tail: int | None = 10,
                server: str | None = None, stop: threading.Event | None = None) -> None:
    """Until interrupted (or ``stop``): a thread per server streams its log into one queue; servers that
    appear later (a scaled or replaced pod) are picked up."""
    stop = stop or threading.Event()
    lines: queue.Queue[tuple[str, str]] = queue.Queue()
    followers: dict[str, threading.Thread] = {}

    def start(pods: Iterable[str]) -> None:
        for pod in pods:
            if pod not in followers:
                followers[pod] = threading.Thread(target=_follow_pod, args=(cluster, pod, tail, lines, stop),
                                                  name=f"log-{pod}", daemon=True)
                followers[pod].start()

    # The database and the server asked for are checked once: a server's follower waits out its pod's
    # replacement, which a later listing could catch half-way.
    start(_pods(cluster, name, server))
    next_refresh = time.monotonic() + REFRESH_PODS_SECONDS
    while True:
        if stop.is_set():
            _drain(lines, out, err)
            return
        if server is None and time.monotonic() >= next_refresh:
            start(p.metadata.name for p in cluster.server_pods(name))
            next_refresh = time.monotonic() + REFRESH_PODS_SECONDS
        try:
            _print(*lines.get(timeout=0.2), out, err)
        except queue.Empty:
            continue


def _print(pod: str, text: str, out: TextIO, err: TextIO) -> None:
    """A line of a server's log, or (pod "") a word about a follower, which goes to stderr."""
    print(text if pod == "" else prefixed(pod, text), file=err if pod == "" else out, flush=True)


def _drain(lines: queue.Queue[tuple[str, str]], out: TextIO, err: TextIO) -> None:
    while True:
        try:
            _print(*lines.get_nowait(), out, err)
        except queue.Empty:
            return


def _pods(cluster: Cluster, name: str, server: str | None) -> list[str]:
    cluster.sampledb(name)
    pods = [p.metadata.name for p in cluster.server_pods(name)]
    if server:
        if server not in pods:
            raise NotAServer(server, name, pods)
        return [server]
    return pods


def _follow_pod(cluster: Cluster, pod: str, tail: int | None, lines: queue.Queue[tuple[str, str]],
                stop: threading.Event) -> None:
    last: tuple[str, str] | None = None
    complained = False
    while not stop.is_set():
        kwargs: dict[str, Any] = {"follow": True, "timestamps": True, "_preload_content": False}
        if last is None and tail is not None:
            kwargs["tail_lines"] = tail
        elif last is not None:
            kwargs["since_seconds"] = _since_seconds(last)
        try:
            response = cluster.pod_log(pod, **kwargs)
            complained = False
            for raw in _stream_lines(response):
                key, text = split_timestamp(raw)
                if last is not None and key[0] and key <= last:
                    continue  # printed before this reconnect
                last = key if key[0] else last
                lines.put((pod, text))
                if stop.is_set():
                    return
        except NotFound:
            if not complained:
                lines.put(("", f"{pod}: pod is gone; waiting for it to come back"))
                complained = True
        except CliError as exc:  # the container is not running yet (400), and the like
            if not complained:
                lines.put(("", f"{pod}: no log yet: {exc}"))
                complained = True
        except Exception as exc:  # the stream was cut (the API server, the node): reconnect
            if not complained:
                lines.put(("", f"{pod}: log stream interrupted ({exc.__class__.__name__}); reconnecting"))
                complained = True
        stop.wait(RECONNECT_SECONDS)


def _since_seconds(last: tuple[str, str]) -> int:
    try:
        then = datetime.fromisoformat(last[0]).replace(tzinfo=UTC)
    except ValueError:
        return 60
    return max(1, int((datetime.now(UTC) - then).total_seconds()) + 2)


def _stream_lines(response: Any) -> Iterator[str]:
    """Lines of a streamed (urllib3) response as they arrive; a str for clients that preload."""
    if isinstance(response, str):
        yield from response.splitlines()
        return
    buffer = b""
    try:
        for chunk in response.stream(4096, decode_content=True):
            buffer += chunk
            *complete, buffer = buffer.split(b"\n")
            for raw in complete:
                yield raw.decode(errors="replace").rstrip("\r")
        if buffer:
            yield buffer.decode(errors="replace")
    finally:
        release = getattr(response, "release_conn", None)
        if release:
            release()
