"""Reading a run's job events the way the Go ansible-operator does (and fixing what it got wrong)."""

from __future__ import annotations

from runner.execution.outcome import UNKNOWN_FAILURE, interpret


def stats(ok=1, changed=0, failures=0, skipped=0, rescued=0):
    return {"event": "playbook_on_stats", "created": "2026-11-22T03:00:00.000001+00:00", "event_data": {
        "ok": {"localhost": ok}, "changed": {"localhost": changed}, "failures": {"localhost": failures} if failures else {},
        "skipped": {"localhost": skipped}, "rescued": {"localhost": rescued} if rescued else {}}}


def failed(msg, ignore=False):
    return {"event": "runner_on_failed", "event_data": {"task": "t", "ignore_errors": ignore, "res": {"msg": msg}}}


def test_success_counts_and_completion() -> None:
    out = interpret([stats(ok=3, changed=1, skipped=2)], 0, "successful")
    assert out.ok and out.failures == []
    assert out.result == {"ok": 3, "changed": 1, "skipped": 2, "failures": 0,
                          "completion": "2026-11-22T03:00:00.000001+00:00"}


def test_failure_messages_joined_ignoring_ignored_errors() -> None:
    out = interpret([failed("ignored", ignore=True), failed("first"), failed("second"), stats(failures=1)], 2, "failed")
    assert not out.ok and out.failures == ["first", "second"]


def test_rescued_failure_is_not_a_failure() -> None:
    out = interpret([failed("rescued one"), stats(rescued=1)], 0, "successful")
    assert out.ok and out.failures == []


def test_failure_without_message_and_run_without_stats() -> None:
    out = interpret([{"event": "runner_on_failed", "event_data": {"res": {}}}, stats(failures=1)], 2, "failed")
    assert out.failures == [UNKNOWN_FAILURE]
    crashed = interpret([], 250, "failed")
    assert not crashed.ok and "without a result" in crashed.failures[0]


def test_requeue_after_and_metrics() -> None:
    events = [
        {"event": "runner_on_ok", "event_data": {"task_action": "operator_sdk.util.requeue_after", "res": {"period": "1m30s"}}},
        {"event": "runner_on_ok", "event_data": {"task_action": "operator_sdk.util.osdk_metric",
                                                 "res": {"osdk_metric": {"name": "m", "counter": {"increment": True}}}}},
        stats(),
    ]
    out = interpret(events, 0, "successful")
    assert out.requeue_after == 90 and out.metrics == [{"name": "m", "counter": {"increment": True}}]


def test_loop_failures_report_the_items_messages() -> None:
    loop = {"event": "runner_on_failed", "event_data": {"task": "t", "res": {
        "msg": "One or more items failed", "results": [
            {"failed": True, "msg": "pod a: invalid label"}, {"failed": False, "msg": "ok"},
            {"failed": True, "msg": "pod c: invalid label"}]}}}
    out = interpret([loop, stats(failures=1)], 2, "failed")
    assert out.failures == ["pod a: invalid label", "pod c: invalid label"]


def test_a_no_log_failure_says_the_output_was_hidden() -> None:
    hidden = "the output has been hidden due to the fact that 'no_log: true' was specified for this result"
    out = interpret([{"event": "runner_on_failed", "event_data": {"task": "t", "res": {"censored": hidden}}},
                     stats(failures=1)], 2, "failed")
    assert out.failures == [hidden]


def test_each_item_of_a_looped_osdk_metric_is_a_metric() -> None:
    item = {"event": "runner_item_on_ok", "event_data": {"task_action": "operator_sdk.util.osdk_metric",
                                                          "res": {"osdk_metric": {"name": "m", "gauge": {"set": 1}}}}}
    # the task's own event carries the items again, under results: not counted twice
    task = {"event": "runner_on_ok", "event_data": {"task_action": "operator_sdk.util.osdk_metric",
                                                     "res": {"results": [{"osdk_metric": {"name": "m"}}] * 2}}}
    out = interpret([item, item, task], 0, "successful")
    assert out.metrics == [{"name": "m", "gauge": {"set": 1}}] * 2


def _requeue(period: str) -> dict:
    return {"event": "runner_on_ok", "event_data": {"task_action": "operator_sdk.util.requeue_after",
                                                    "res": {"period": period}}}


def test_the_first_requeue_after_wins_as_in_the_go_operator() -> None:
    out = interpret([_requeue("30s"), _requeue("5m"), stats()], 0, "successful")
    assert out.ok and out.requeue_after == 30


def test_a_requeue_period_beyond_gos_durations_is_invalid() -> None:
    out = interpret([_requeue("9999999999h"), stats()], 0, "successful")
    assert not out.ok and out.requeue_after is None
    assert out.failures == ["requeue_after: invalid time '9999999999h'"]


def test_the_output_of_a_run_without_events_is_read_from_its_end(tmp_path, caplog) -> None:
    """Megabytes, and bytes that are no UTF-8: the log shows the end of it, and the reconcile goes on to write
    the Failure (reading it must not raise)."""
    from pathlib import Path

    from runner.execution import RunResult
    from runner.reconcile import Reconciler, Settings

    (tmp_path / "stdout").write_bytes(b"x" * 5_000_000 + b"\xff\xfe caf\xe9 ERROR! the end\n")
    reconciler = Reconciler.__new__(Reconciler)
    reconciler.settings = Settings(0, Path(tmp_path), "", "Tasks")
    result = RunResult(rc=4, status="failed", events=[], artifact_dir=tmp_path)
    request = type("Request", (), {"label": "Widget ns/w", "ident": "1"})()
    with caplog.at_level("ERROR"):
        reconciler._log_result(request, result, 1.0, "run")  # type: ignore[arg-type]
    shown = caplog.records[-1].getMessage()
    assert shown.endswith("ERROR! the end\n") and len(shown) < 5000
