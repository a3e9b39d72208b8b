"""Level-triggered scheduling: coalescing, one more run for changes during a run, caps, backoff, requeue."""

from __future__ import annotations

import asyncio
from itertools import pairwise

import pytest

from runner.queue import CHANGE, RESYNC, Backoff, Outcome, WorkQueue


class Recorder:
    def __init__(self, delay: float = 0.0, outcomes: list[Outcome] | None = None) -> None:
        self.delay, self.outcomes = delay, list(outcomes or [])
        self.calls: list[tuple[tuple[str, str], frozenset[str], float]] = []
        self.active = self.peak = 0

    async def __call__(self, key: tuple[str, str], reasons: frozenset[str]) -> Outcome:
        self.calls.append((key, reasons, asyncio.get_running_loop().time()))
        self.active += 1
        self.peak = max(self.peak, self.active)
        await asyncio.sleep(self.delay)
        self.active -= 1
        return self.outcomes.pop(0) if self.outcomes else Outcome()


def make(handler, workers=1, cap=10, resync=None, backoff=Backoff(0.05, 0.4)):  # noqa: B008
    """A queue whose handler's successes ask for ``resync`` (the reconcile period), as the reconciler's do."""
    async def with_resync(key: tuple[str, str], reasons: frozenset[str]) -> Outcome:
        outcome = await handler(key, reasons)
        if not outcome.error and not outcome.forget and outcome.resync_after is None:
            outcome.resync_after = resync
        return outcome

    return WorkQueue("K", workers, with_resync, asyncio.Semaphore(cap), backoff)


def test_a_key_is_queued_once() -> None:
    async def go() -> Recorder:
        rec = Recorder()
        q = make(rec)
        for _ in range(5):
            q.add(("ns", "a"))
        q.add(("ns", "b"))
        q.start()
        await asyncio.sleep(0.1)
        await q.shutdown(1)
        return rec

    rec = asyncio.run(go())
    assert [c[0] for c in rec.calls] == [("ns", "a"), ("ns", "b")]


def test_changes_during_a_run_give_exactly_one_more_run() -> None:
    async def go() -> Recorder:
        rec = Recorder(delay=0.2)
        q = make(rec, workers=4)
        q.start()
        q.add(("ns", "a"))
        await asyncio.sleep(0.05)  # the run is in progress
        for _ in range(3):
            q.add(("ns", "a"))
        await asyncio.sleep(0.6)
        await q.shutdown(1)
        return rec

    rec = asyncio.run(go())
    assert len(rec.calls) == 2
    assert rec.peak == 1  # never two runs of one object at once, even with free workers


def test_per_kind_workers_and_global_cap() -> None:
    async def go() -> tuple[Recorder, Recorder, int]:
        a, b = Recorder(delay=0.1), Recorder(delay=0.1)
        cap = asyncio.Semaphore(3)
        qa = WorkQueue("A", 2, a, cap)
        qb = WorkQueue("B", 2, b, cap)
        peak = 0

        async def watch() -> None:
            nonlocal peak
            while True:
                peak = max(peak, a.active + b.active)
                await asyncio.sleep(0.005)

        w = asyncio.create_task(watch())
        for q in (qa, qb):
            q.start()
            for i in range(5):
                q.add(("ns", str(i)))
        await asyncio.sleep(0.8)
        w.cancel()
        await qa.shutdown(1)
        await qb.shutdown(1)
        return a, b, peak

    a, b, peak = asyncio.run(go())
    assert len(a.calls) == 5 and len(b.calls) == 5
    assert a.peak == 2 and b.peak == 2  # per kind
    assert peak == 3  # across kinds


class VirtualClockLoop(asyncio.SelectorEventLoop):
    """An event loop whose clock jumps to the next timer whenever nothing else is ready: delays are exact and take
    no real time, so a gap can be bounded from both sides without depending on the machine's load."""

    def __init__(self) -> None:
        super().__init__()
        self._now = 0.0
        select = self._selector.select

        def jump(timeout: float | None = None) -> list:
            events = select(0)
            if not events and timeout:
                self._now += timeout
            return events

        self._selector.select = jump  # type: ignore[method-assign]

    def time(self) -> float:
        return self._now


def test_failures_back_off_exponentially_then_reset() -> None:
    async def go() -> Recorder:
        # three failures, a success, then (at the resync) a failure again and a success
        rec = Recorder(outcomes=[Outcome(error=True)] * 3 + [Outcome(), Outcome(error=True), Outcome()])
        q = make(rec, resync=1.0, backoff=Backoff(0.05, 0.4))
        q.start()
        q.add(("ns", "a"))
        await asyncio.sleep(2.0)  # virtual seconds
        await q.shutdown(1)
        return rec

    with asyncio.Runner(loop_factory=VirtualClockLoop) as runner:
        rec = runner.run(go())
    gaps = [b[2] - a[2] for a, b in pairwise(rec.calls[:6])]
    # doubling from the base; the success resets the count, so the next failure waits the base again, not 0.4
    assert gaps == pytest.approx([0.05, 0.1, 0.2, 1.0, 0.05], abs=1e-9)
    assert [c[1] for c in rec.calls[:6]] == [frozenset({CHANGE})] + [frozenset({"retry"})] * 3 + [
        frozenset({RESYNC}), frozenset({"retry"})]


def test_requeue_after_overrides_period_and_backoff() -> None:
    async def go() -> Recorder:
        rec = Recorder(outcomes=[Outcome(error=True, requeue_after=None), Outcome(requeue_after=0.05),
                                 Outcome(requeue_after=0.05)])
        q = make(rec, resync=10.0, backoff=Backoff(0.01, 0.01))
        q.start()
        q.add(("ns", "a"))
        await asyncio.sleep(0.3)
        await q.shutdown(1)
        return rec

    rec = asyncio.run(go())
    reasons = [c[1] for c in rec.calls]
    assert reasons[:3] == [frozenset({CHANGE}), frozenset({"retry"}), frozenset({"requeue"})]
    assert len(rec.calls) == 4  # the last success falls back to the 10 s resync


def test_resync_period_and_forget() -> None:
    async def go() -> tuple[Recorder, bool]:
        rec = Recorder()
        q = make(rec, resync=0.05)
        q.start()
        q.add(("ns", "a"))
        await asyncio.sleep(0.18)
        q.forget(("ns", "a"))
        n = len(rec.calls)
        await asyncio.sleep(0.15)
        still = len(rec.calls) == n
        await q.shutdown(1)
        return rec, still

    rec, stopped = asyncio.run(go())
    assert len(rec.calls) >= 3 and all(c[1] == frozenset({RESYNC}) for c in rec.calls[1:])
    assert stopped  # a forgotten (deleted) object has no more resyncs


def test_shutdown_waits_for_runs_in_progress() -> None:
    async def go() -> tuple[bool, Recorder]:
        rec = Recorder(delay=0.2)
        q = make(rec)
        q.start()
        q.add(("ns", "a"))
        await asyncio.sleep(0.05)
        finished = await q.shutdown(2)
        return finished, rec

    finished, rec = asyncio.run(go())
    assert finished and rec.active == 0


def test_backoff_is_capped_at_any_failure_count() -> None:
    backoff = Backoff(1.0, 300.0)
    assert [backoff.delay(n) for n in (1, 2, 9, 10)] == [1.0, 2.0, 256.0, 300.0]
    for failures in (1024, 1025, 10_000, 10**9):  # ~3.6 days of failures at the cap, and far beyond
        assert backoff.delay(failures) == 300.0


def test_a_key_that_failed_for_days_is_still_retried_and_its_worker_lives() -> None:
    async def go() -> Recorder:
        rec = Recorder(outcomes=[Outcome(error=True), Outcome(error=True), Outcome()])
        q = make(rec, backoff=Backoff(0.01, 0.02))
        q._failures[("ns", "a")] = 1024  # a CR broken since long ago
        q.start()
        q.add(("ns", "a"))
        await asyncio.sleep(0.2)
        q.add(("ns", "b"))  # the kind's only worker still takes new work
        await asyncio.sleep(0.1)
        await q.shutdown(1)
        return rec

    rec = asyncio.run(go())
    assert [c[0] for c in rec.calls] == [("ns", "a")] * 3 + [("ns", "b")]


def test_a_handler_that_raises_is_retried_and_never_kills_its_worker() -> None:
    async def go() -> list[tuple[str, str]]:
        seen: list[tuple[str, str]] = []

        async def handler(key: tuple[str, str], reasons: frozenset[str]) -> Outcome:
            seen.append(key)
            if key == ("ns", "bad") and seen.count(key) < 3:
                raise RuntimeError("boom")
            return Outcome()

        q = make(handler, backoff=Backoff(0.01, 0.01))
        q.start()
        q.add(("ns", "bad"))
        await asyncio.sleep(0.15)
        q.add(("ns", "good"))
        await asyncio.sleep(0.1)
        await q.shutdown(1)
        return seen

    assert asyncio.run(go()) == [("ns", "bad")] * 3 + [("ns", "good")]


def test_work_queued_during_a_run_that_ends_with_forget_is_kept() -> None:
    """The object was deleted (the run ends with forget) and created again meanwhile: that creation runs."""
    async def go() -> Recorder:
        rec = Recorder(delay=0.1, outcomes=[Outcome(forget=True), Outcome()])
        q = make(rec, resync=None)
        q.start()
        q.add(("ns", "a"))
        await asyncio.sleep(0.03)  # in the run: DELETED then ADDED arrive
        q.forget(("ns", "a"))
        q.add(("ns", "a"))
        await asyncio.sleep(0.3)
        await q.shutdown(1)
        return rec

    rec = asyncio.run(go())
    assert len(rec.calls) == 2


def test_forget_of_an_idle_key_keeps_its_queued_work() -> None:
    async def go() -> Recorder:
        rec = Recorder()
        q = make(rec)
        q.add(("ns", "a"))  # not started yet: the key waits in the queue
        q.forget(("ns", "a"))
        q.start()
        await asyncio.sleep(0.05)
        await q.shutdown(1)
        return rec

    assert len(asyncio.run(go()).calls) == 1


def test_periods_that_are_not_positive_mean_no_requeue() -> None:
    """Validated where they come from; the queue itself never spins on one either."""
    async def go(outcome: Outcome, resync: float | None) -> int:
        rec = Recorder(outcomes=[outcome] * 1000)
        q = make(rec, resync=resync)
        q.start()
        q.add(("ns", "a"))
        await asyncio.sleep(0.2)
        await q.shutdown(1)
        return len(rec.calls)

    assert asyncio.run(go(Outcome(requeue_after=-1.0), None)) == 1
    assert asyncio.run(go(Outcome(), -300.0)) == 1
    assert asyncio.run(go(Outcome(requeue_after=0.0), None)) == 1
