"""What a run's events mean for the operator: success, failure messages, counts, requeue, metrics."""

from __future__ import annotations

import dataclasses
import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from ..config import parse_duration

HOST = "localhost"
UNKNOWN_FAILURE = "unknown playbook failure"
REQUEUE_ACTIONS = ("operator_sdk.util.requeue_after", "requeue_after")
METRIC_ACTIONS = ("operator_sdk.util.osdk_metric", "osdk_metric")


@dataclass
class Outcome:
    ok: bool
    failures: list[str] = field(default_factory=list)
    result: dict[str, Any] | None = None  # ansibleResult: ok, changed, skipped, failures, completion
    requeue_after: float | None = None
    metrics: list[dict[str, Any]] = field(default_factory=list)
    failed_task: str | None = None

    @property
    def changed(self) -> int:
        return int((self.result or {}).get("changed", 0))

    def stopped(self, why: str) -> Outcome:
        """The run was stopped before its end: a failure, for that reason first."""
        return dataclasses.replace(self, ok=False, failures=[why, *self.failures], requeue_after=None)


def _count(stats: dict[str, Any], key: str) -> int:
    value = stats.get(key) or {}
    return int(value.get(HOST, 0)) if isinstance(value, dict) else 0


def _messages(res: dict[str, Any]) -> list[str]:
    """The task's msg; for a loop, the failed items' own messages rather than "One or more items failed"."""
    items = [r for r in res.get("results") or [] if isinstance(r, dict) and r.get("failed")]
    msgs = [r["msg"] for r in items if isinstance(r.get("msg"), str) and r["msg"]]
    if msgs:
        return list(dict.fromkeys(msgs))
    msg = res.get("msg") or res.get("censored")  # a no_log task's result says only that it was hidden
    return [msg if isinstance(msg, str) and msg else UNKNOWN_FAILURE]


def interpret(events: list[dict[str, Any]], rc: int, status: str) -> Outcome:
    failures: list[str] = []
    failed_task = None
    requeue = None
    metrics = []
    invalid: list[str] = []  # what the run asked that cannot be done: a failure even if no task failed
    stats = None
    for ev in events:
        name = ev.get("event")
        data = ev.get("event_data") or {}
        action = data.get("task_action")
        res = data.get("res") if isinstance(data.get("res"), dict) else {}
        # a looped task reports each item's result in its own event (the task's own holds them all)
        ok = name in ("runner_on_ok", "runner_item_on_ok")
        if ok and action in REQUEUE_ACTIONS and res.get("period"):
            if requeue is not None:
                continue  # the first one wins, as in the Go operator (which stops reading there)
            try:
                requeue = parse_duration(str(res["period"]))
            except ValueError:
                invalid.append(f"requeue_after: invalid time {res['period']!r}")
        elif ok and action in METRIC_ACTIONS and isinstance(res.get("osdk_metric"), dict):
            metrics.append(res["osdk_metric"])
        elif name in ("runner_on_failed", "runner_on_unreachable") and not data.get("ignore_errors"):
            failures.extend(_messages(res))
            failed_task = failed_task or data.get("task")
        elif name == "playbook_on_stats":
            stats = ev
    result = None
    if stats is not None:
        sd = stats.get("event_data") or {}
        result = {
            "ok": _count(sd, "ok"),
            "changed": _count(sd, "changed"),
            "skipped": _count(sd, "skipped"),
            "failures": _count(sd, "failures") + _count(sd, "dark"),
            "completion": stats.get("created") or dt.datetime.now(dt.UTC).isoformat(),
        }
        # A failed task inside a block with a rescue is not a failure of the run.
        if result["failures"] == 0 and rc == 0:
            failures = []
    failures += invalid
    ok = stats is not None and rc == 0 and status == "successful" and not failures
    if not ok and not failures:
        failures = [UNKNOWN_FAILURE if stats is not None else f"the run ended without a result ({status}, rc={rc})"]
    return Outcome(ok=ok, failures=failures, result=result, requeue_after=requeue, metrics=metrics,
                   failed_task=failed_task)
