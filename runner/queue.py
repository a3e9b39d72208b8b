"""Level-triggered scheduling, with controller-runtime's workqueue semantics.

A key (namespace, name) is queued at most once. A key added while its run is in progress is marked
dirty and queued again when that run ends, so it gets exactly one more run, which reads the newest
state. Delayed adds implement the resync period, ``requeue_after`` and the failure backoff; the earliest
pending delay wins. Each kind has its own workers (its max-concurrent-reconciles); every kind's runs
also share one global cap.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from . import metrics

log = logging.getLogger(__name__)

Key = tuple[str, str]  # (namespace, name); namespace "" for cluster-scoped objects

# Why a key is queued. A run triggered only by RESYNC is "idle": if it changes nothing, it writes nothing.
CHANGE, RESYNC, RETRY, REQUEUE = "change", "resync", "retry", "requeue"


@dataclass
class Outcome:
    """What a run asks of the queue: retry with backoff (error), or come back after ``requeue_after`` (the
    role asked) or else ``resync_after`` (the reconcile period). Periods are validated by the reconciler;
    one that is None or not positive means no requeue."""

    error: bool = False
    requeue_after: float | None = None
    resync_after: float | None = None
    forget: bool = False  # the object is gone: drop its timers and failure count


@dataclass
class _Delayed:
    due: float
    reason: str
    handle: asyncio.TimerHandle


@dataclass
class Backoff:
    base: float = 1.0
    cap: float = 300.0

    def delay(self, failures: int) -> float:
        # The exponent is bounded: 2**1024 is no float, and the cap is long reached by then.
        return min(self.cap, math.ldexp(self.base, min(max(0, failures - 1), 64)))


@dataclass
class WorkQueue:
    name: str  # the kind, for metrics and logs
    workers: int
    handler: Callable[[Key, frozenset[str]], Awaitable[Outcome]]
    global_cap: asyncio.Semaphore
    backoff: Backoff = field(default_factory=Backoff)
    # Runs start only while this says yes (the leader's lease is fresh); checked right before each run.
    may_run: Callable[[], bool] = lambda: True
    controller: str = ""  # the Go operator's name for the kind's controller and workqueue (metrics); else name

    def __post_init__(self) -> None:
        self.controller = self.controller or self.name
        metrics.init_controller(self.controller, self.workers)
        labels = (self.controller, self.controller)
        metrics.WORKQUEUE_DEPTH.labels(*labels, "").set_function(lambda: len(self._dirty))
        metrics.WORKQUEUE_UNFINISHED.labels(*labels).set_function(
            lambda: sum(time.monotonic() - t for t in self._started.values()))
        metrics.WORKQUEUE_LONGEST.labels(*labels).set_function(
            lambda: max((time.monotonic() - t for t in self._started.values()), default=0.0))
        self._added_at: dict[Key, float] = {}
        self._started: dict[Key, float] = {}
        self._order: deque[Key] = deque()
        self._dirty: dict[Key, set[str]] = {}
        self._processing: set[Key] = set()
        self._delayed: dict[Key, _Delayed] = {}
        self._failures: dict[Key, int] = {}
        self._wakeup = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._accepting = True
        self._idle = asyncio.Event()
        self._idle.set()

    # ------------------------------------------------------------------ adding
    def add(self, key: Key, reason: str = CHANGE) -> None:
        if not self._accepting:
            return
        if key in self._dirty:
            self._dirty[key].add(reason)
            return
        self._dirty[key] = {reason}
        metrics.WORKQUEUE_ADDS.labels(self.controller, self.controller).inc()
        self._added_at.setdefault(key, time.monotonic())
        if key not in self._processing:
            self._order.append(key)
            self._wakeup.set()
        self._report_depth()

    def add_after(self, key: Key, delay: float, reason: str) -> None:
        if not self._accepting:
            return
        if delay <= 0:
            self.add(key, reason)
            return
        loop = asyncio.get_running_loop()
        due = loop.time() + delay
        pending = self._delayed.get(key)
        if pending and pending.due <= due:
            return
        if pending:
            pending.handle.cancel()
        handle = loop.call_later(delay, self._fire, key)
        self._delayed[key] = _Delayed(due, reason, handle)

    def _fire(self, key: Key) -> None:
        pending = self._delayed.pop(key, None)
        if pending:
            self.add(key, pending.reason)

    def forget(self, key: Key) -> None:
        """The object is gone: no more resyncs or retries for it. Work already queued for the key stays: an
        object of that name created again meanwhile must get its run."""
        pending = self._delayed.pop(key, None)
        if pending:
            pending.handle.cancel()
        self._failures.pop(key, None)

    def _report_depth(self) -> None:
        metrics.QUEUE_DEPTH.labels(self.name).set(len(self._order))

    # ------------------------------------------------------------------ processing
    async def _next(self) -> tuple[Key, frozenset[str]]:
        while not self._order:
            self._wakeup.clear()
            await self._wakeup.wait()
        key = self._order.popleft()
        reasons = frozenset(self._dirty.pop(key, {CHANGE}))
        self._processing.add(key)
        now = time.monotonic()
        if (added := self._added_at.pop(key, None)) is not None:
            metrics.WORKQUEUE_LATENCY.labels(self.controller, self.controller).observe(now - added)
        self._started[key] = now
        self._idle.clear()
        self._report_depth()
        return key, reasons

    def _schedule(self, key: Key, outcome: Outcome) -> None:
        if outcome.forget:
            self.forget(key)
        elif outcome.error:
            failures = self._failures.get(key, 0) + 1
            self._failures[key] = failures
            metrics.WORKQUEUE_RETRIES.labels(self.controller, self.controller).inc()
            self.add_after(key, self.backoff.delay(failures), RETRY)
        else:
            self._failures.pop(key, None)
            delay = outcome.requeue_after if outcome.requeue_after is not None else outcome.resync_after
            if delay is not None and delay > 0:
                # A resync must not fire earlier than asked because an older, shorter delay is pending.
                old = self._delayed.pop(key, None)
                if old:
                    old.handle.cancel()
                self.add_after(key, delay, REQUEUE if outcome.requeue_after is not None else RESYNC)

    def _done(self, key: Key, outcome: Outcome) -> None:
        self._processing.discard(key)
        if (started := self._started.pop(key, None)) is not None:
            metrics.WORKQUEUE_WORK_DURATION.labels(self.controller, self.controller).observe(time.monotonic() - started)
        try:
            self._schedule(key, outcome)
        except Exception:  # a worker must outlive any bookkeeping error: retry the key later
            log.exception("scheduling the next run of %s %s/%s failed; retrying it in %.0fs", self.name, *key,
                          self.backoff.cap)
            asyncio.get_running_loop().call_later(self.backoff.cap, self.add, key, RETRY)
        if key in self._dirty:
            self._order.append(key)
            self._wakeup.set()
        if not self._processing:
            self._idle.set()
        self._report_depth()

    async def _worker(self, index: int) -> None:
        while True:
            key, reasons = await self._next()
            outcome = Outcome(error=True)
            try:
                async with self.global_cap:
                    while not self.may_run():  # noqa: ASYNC110 - a time-based condition, no event to wait on
                        await asyncio.sleep(0.2)  # the operator is about to stop (leadership lost)
                    metrics.IN_FLIGHT.labels(self.name).inc()
                    metrics.ACTIVE_WORKERS.labels(self.controller).inc()
                    started = time.monotonic()
                    try:
                        outcome = await self.handler(key, reasons)
                    finally:
                        metrics.IN_FLIGHT.labels(self.name).dec()
                        metrics.ACTIVE_WORKERS.labels(self.controller).dec()
                        metrics.RECONCILE_TIME.labels(self.controller).observe(time.monotonic() - started)
                    self._count(outcome)
            except asyncio.CancelledError:
                self._processing.discard(key)
                self._started.pop(key, None)
                raise
            except Exception:
                log.exception("reconcile of %s %s/%s crashed; retrying with backoff", self.name, *key)
                metrics.RECONCILE_PANICS.labels(self.controller).inc()
                self._count(outcome)
            self._done(key, outcome)

    def _count(self, outcome: Outcome) -> None:
        """controller_runtime_reconcile_total's result, as controller-runtime tells them apart: a success that
        comes back after a period (the reconcile period included, as in the Go operator) is requeue_after."""
        if outcome.error:
            metrics.RECONCILE_ERRORS.labels(self.controller).inc()
            result = "error"
        elif not outcome.forget and any(d is not None and d > 0 for d in (outcome.requeue_after, outcome.resync_after)):
            result = "requeue_after"
        else:
            result = "success"
        metrics.RECONCILE_TOTAL.labels(self.controller, result).inc()

    def start(self) -> None:
        for i in range(self.workers):
            self._tasks.append(asyncio.create_task(self._worker(i), name=f"worker-{self.name}-{i}"))

    async def shutdown(self, timeout: float | None) -> bool:
        """Stop taking work; let runs in progress finish within ``timeout`` (None: however long they take),
        then cancel them. Returns True when everything finished in time."""
        self._accepting = False
        for pending in self._delayed.values():
            pending.handle.cancel()
        self._delayed.clear()
        self._order.clear()
        self._dirty.clear()
        finished = True
        if self._processing:
            try:
                await asyncio.wait_for(self._idle.wait(), timeout)
            except TimeoutError:
                finished = False
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        return finished
