"""Operator high availability: two operator processes, one Lease, never two leaders running roles."""

from __future__ import annotations

import os
import re
import signal
import time
import uuid

from tests.apiproxy import Fault
from tests.kube import Kube, wait_for
from tests.operator import OperatorProcess, Widgets, session_processes, widget_watch

FAST_LEASE = ("--leader-election-lease-duration", "6s", "--leader-election-renew-deadline", "4s",
              "--leader-election-retry-period", "1s")


def ha_args(namespace: str, lock: str) -> list[str]:
    return ["--leader-elect", "--leader-election-id", lock, "--leader-election-namespace", namespace, *FAST_LEASE]


def stamp(line: str) -> float:
    s = line[:23]
    return time.mktime(time.strptime(s[:19], "%Y-%m-%d %H:%M:%S")) + int(s[20:23]) / 1000


def run_intervals(op: OperatorProcess) -> list[tuple[float, float]]:
    """(start, end) of every run this operator made, from its log. A run that ended without a start in the log
    fails the test: the start's wording changed, and overlaps could no longer be seen."""
    spans, open_at = [], {}
    for line in op.logs().splitlines():
        m = re.search(r"(run|finalizer) (start|end): Widget (\S+)", line)
        if not m:
            continue
        if m.group(2) == "start":
            open_at[m.group(3)] = stamp(line)
        else:
            assert m.group(3) in open_at, f"{op.name}: a run ended that never started: {line}"
            spans.append((open_at.pop(m.group(3)), stamp(line)))
    spans += [(t, float("inf")) for t in open_at.values()]
    return spans


def leader_and_standby(start_operator, namespace: str) -> tuple[OperatorProcess, OperatorProcess]:
    """Two operators on one Lease: "a" leads, "b" waits."""
    lock = f"lock-{uuid.uuid4().hex[:6]}"
    a = start_operator([widget_watch()], *ha_args(namespace, lock), name="a")
    b = start_operator([widget_watch()], *ha_args(namespace, lock), name="b", wait=False)
    b.wait_for_log("waiting to become the leader")
    return a, b


def assert_never_both(a: OperatorProcess, b: OperatorProcess) -> None:
    runs_a, runs_b = run_intervals(a), run_intervals(b)
    # every test here has a Widget run to success: no run found means the log says it another way
    assert runs_a or runs_b, f"no run start/end in either operator's log:\n{a.logs()[-2000:]}\n{b.logs()[-2000:]}"
    for s1, e1 in runs_a:
        for s2, e2 in runs_b:
            assert e1 <= s2 or e2 <= s1, f"runs overlap: {a.name} {s1}-{e1} and {b.name} {s2}-{e2}"


def test_standby_takes_over_at_once_after_sigterm(kube: Kube, namespace: str, widgets: Widgets,
                                                  start_operator) -> None:
    a, b = leader_and_standby(start_operator, namespace)
    time.sleep(1)
    assert a.http_get("/readyz")[0] == 200
    # the standby is ready (a rolling update of the Deployment can go on) but runs nothing
    assert b.http_get("/healthz") == (200, "ok") and b.http_get("/readyz")[0] == 200
    widgets.create("one", {"message": "by a"})
    widgets.wait_successful("one")
    assert a.runs("one") and not b.runs("one")

    t0 = time.monotonic()
    assert a.stop(signal.SIGTERM) == 0
    b.wait_for_log("became the leader", timeout=10)
    failover = time.monotonic() - t0
    assert failover < 4, f"standby took {failover:.1f}s after a graceful stop (the Lease is released)"
    assert "released lease" in a.logs()
    widgets.create("two", {"message": "during the hand-over"})
    widgets.wait_successful("two")
    assert b.runs("two") and not a.runs("two")
    assert b.http_get("/readyz")[0] == 200
    assert_never_both(a, b)


def test_standby_replaces_a_killed_leader_within_the_lease(kube: Kube, namespace: str, widgets: Widgets,
                                                           start_operator) -> None:
    a, b = leader_and_standby(start_operator, namespace)
    a.kill_group()  # SIGKILL: no chance to release the Lease
    t0 = time.monotonic()
    widgets.create("orphan", {"message": "created while nobody leads"})
    b.wait_for_log("became the leader", timeout=20)
    failover = time.monotonic() - t0
    assert failover <= 6 + 3, f"took {failover:.1f}s, lease duration is 6s (+ retry period and slack)"
    widgets.wait_successful("orphan")
    assert_never_both(a, b)


def test_a_leader_that_cannot_renew_stops_before_its_lease_can_be_taken(kube: Kube, namespace: str, widgets: Widgets,
                                                                       start_operator) -> None:
    a, b = leader_and_standby(start_operator, namespace)
    widgets.create("first", {})
    widgets.wait_successful("first")
    assert a.proc is not None
    os.killpg(a.proc.pid, signal.SIGSTOP)  # frozen: cannot renew
    try:
        b.wait_for_log("became the leader", timeout=20)
        widgets.create("second", {"message": "while a is frozen"})
        widgets.patch("first", {"spec": {"message": "changed while a is frozen"}})
        widgets.wait_successful("second")
    finally:
        os.killpg(a.proc.pid, signal.SIGCONT)
    assert a.proc.wait(20) == 1  # it noticed, stopped and exited
    assert "leadership lost" in a.logs()
    widgets.wait_successful("first", generation=2)
    assert_never_both(a, b)
    assert len(a.runs()) == 1  # the frozen leader started nothing after it woke up


def test_a_paused_leader_writes_nothing_after_it_wakes(kube: Kube, namespace: str, widgets: Widgets, api_proxy,
                                                       start_operator) -> None:
    """The leader is paused past its lease (CPU starvation, a stopped container) while its run goes on; the
    standby takes over. The run's next write waits in the paused leader's proxy. Woken, the old leader must
    write nothing: not that write, not the run's status, finalizers or Events, and its runs stop. Every
    request the old leader makes goes through a recording proxy."""
    lock = f"lock-{uuid.uuid4().hex[:6]}"
    a = start_operator([widget_watch()], *ha_args(namespace, lock), name="a", env=api_proxy.env())
    b = start_operator([widget_watch()], *ha_args(namespace, lock), name="b", wait=False)
    b.wait_for_log("waiting to become the leader")
    widgets.create("slow", {"sleep": 4, "postConfigmap": True, "message": "written by a run"})
    a.wait_for_log(r"run start: Widget \S+/slow")
    time.sleep(2)  # the run is in its pause (and no longer needs the operator to start)
    assert a.proc is not None
    os.killpg(a.proc.pid, signal.SIGSTOP)  # the operator and its forkserver; its run (a group of its own) goes on
    try:
        b.wait_for_log("became the leader", timeout=30)
        time.sleep(6)  # the run's pause is over: its next write waits in the paused leader's proxy
        # and the API server is slow to answer about the Lease: the loss must not wait for that answer
        api_proxy.inject(Fault(".", "/leases/", None, delay=3.0))
    finally:
        woke = time.time()
        os.killpg(a.proc.pid, signal.SIGCONT)
    assert a.proc.wait(30) == 1
    assert "leadership lost" in a.logs()
    written = [r for r in api_proxy.seen(since=woke) if r.write]
    assert not written, [(r.method, r.path, r.status) for r in written]
    wait_for("the old leader's runs to stop", lambda: session_processes(a.proc.pid) == [], timeout=10)
    widgets.wait_successful("slow")
