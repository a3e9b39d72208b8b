"""Conditions in the ansible-operator's shape; transition times that move only on status changes."""

from __future__ import annotations

from runner import status


def types(conds):
    return {c["type"]: (c["status"], c["reason"]) for c in conds}


def test_running_then_success_then_failure_then_recovery() -> None:
    c = status.running([])
    assert types(c) == {"Running": ("True", "Running")}
    result = {"ok": 2, "changed": 1, "skipped": 0, "failures": 0, "completion": "t1"}
    c = status.done(c, True, result, [])
    assert types(c) == {"Running": ("True", "Successful"), "Successful": ("True", "Successful"), "Failure": ("False", "")}
    assert status.get_condition(c, "Running")["ansibleResult"] == result
    assert status.get_condition(c, "Running")["message"] == "Awaiting next reconciliation"
    c = status.done(status.running(c), False, result, ["task one failed", "task two failed"])
    fail = status.get_condition(c, "Failure")
    assert fail["status"] == "True" and fail["reason"] == "Failed" and fail["message"] == "task one failed\ntask two failed"
    assert types(c)["Successful"] == ("False", "") and types(c)["Running"][0] == "False"
    c = status.done(status.running(c), True, result, [])
    assert types(c)["Failure"] == ("False", "")


def test_transition_time_kept_while_status_unchanged() -> None:
    old = [{"type": "Ready", "status": "True", "reason": "A", "message": "", "lastTransitionTime": "2020-01-01T00:00:00Z"}]
    same_status = status.set_condition(old, status.condition("Ready", "True", "B", "changed message"))
    assert same_status[0]["lastTransitionTime"] == "2020-01-01T00:00:00Z" and same_status[0]["reason"] == "B"
    flipped = status.set_condition(old, status.condition("Ready", "False", "B"))
    assert flipped[0]["lastTransitionTime"] != "2020-01-01T00:00:00Z"


def test_custom_conditions_survive() -> None:
    custom = [{"type": "Ready", "status": "True", "reason": "Up", "message": "", "lastTransitionTime": "x"}]
    c = status.done(status.running(custom), True, None, [])
    assert status.get_condition(c, "Ready") == custom[0]


def test_idle_resync_equivalence_ignores_the_runs_counts_not_its_outcome() -> None:
    a = status.done([], True, {"ok": 1, "changed": 1, "skipped": 0, "failures": 0, "completion": "t1"}, [])
    b = status.done(a, True, {"ok": 1, "changed": 0, "skipped": 0, "failures": 0, "completion": "t2"}, [])
    assert b != a and status.conditions_equivalent(a, b)
    failed = status.done(a, False, {"ok": 0, "changed": 0, "skipped": 0, "failures": 1, "completion": "t3"}, ["boom"])
    assert not status.conditions_equivalent(a, failed)


def test_a_failure_message_of_megabytes_is_cut_to_fit_an_object() -> None:
    conditions = status.done([], False, None, ["x" * 2_000_000])
    message = status.get_condition(conditions, status.FAILURE)["message"]
    assert len(message) < 40_000 and message.endswith("(1967232 more characters in the operator's log)")
