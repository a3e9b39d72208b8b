"""The rollout role's decisions (roles/rollout/filter_plugins/sampledb_rollout.py): servers take a new template
replicas first, the primary only after a switchover (or restarted first when the template lowers a setting no
standby may have lower than its primary); a scale-down or a drain moves the primary first."""

from __future__ import annotations

import json

from tests.plugins import plugin

rollout = plugin("roles/rollout/filter_plugins/sampledb_rollout.py")
step = rollout.sampledb_rollout_step

NEW, OLD = "db-new", "db-old"


def pod(name: str, revision: str = NEW, node: str = "n1", settings: dict | None = None, deleting: bool = False) -> dict:
    meta = {"name": name, "labels": {rollout.REVISION_LABEL: revision},
            "annotations": {rollout.STANDBY_SETTINGS: json.dumps(settings or {"max_connections": "200"})}}
    if deleting:
        meta["deletionTimestamp"] = "2026-11-26T10:00:00Z"
    return {"metadata": meta, "spec": {"nodeName": node}}


def sts(replicas: int = 3, settings: dict | None = None) -> dict:
    return {"metadata": {"generation": 2}, "spec": {"replicas": replicas, "template": {"metadata": {"annotations": {
        rollout.STANDBY_SETTINGS: json.dumps(settings or {"max_connections": "200"})}}}},
            "status": {"observedGeneration": 2, "updateRevision": NEW}}


ALL = ["db-0", "db-1", "db-2"]


def test_nothing_to_do_when_every_server_runs_the_template() -> None:
    s = step([pod(n) for n in ALL], sts(), "db-0", ALL, 3)
    assert s["completed"] and not s["delete"] and not s["switchover_to"]


def test_the_replicas_go_first_one_at_a_time_a_broken_one_before_a_serving_one() -> None:
    pods = [pod("db-0", OLD), pod("db-1", OLD), pod("db-2", OLD)]
    assert step(pods, sts(), "db-0", ALL, 3)["delete"] == "db-2"
    assert step(pods, sts(), "db-0", ["db-0", "db-2"], 3)["delete"] == "db-1"  # db-1 does not serve
    # one is on its way back: wait for it
    waiting = step([pod("db-0", OLD), pod("db-1", OLD), pod("db-2")], sts(), "db-0", ["db-0", "db-1"], 3)
    assert not waiting["delete"] and "db-2" in waiting["message"]


def test_the_primary_goes_last_after_a_switchover_to_an_updated_replica() -> None:
    s = step([pod("db-0", OLD), pod("db-1"), pod("db-2")], sts(), "db-0", ALL, 3)
    assert (s["delete"], s["switchover_to"], s["hold"]) == ("", "db-1", False)
    # after the switchover the old primary is an outdated replica, replaced like any other
    assert step([pod("db-0", OLD), pod("db-1"), pod("db-2")], sts(), "db-1", ALL, 3)["delete"] == "db-0"


def test_a_single_server_is_restarted_in_place_and_held() -> None:
    s = step([pod("db-0", OLD)], sts(1), "db-0", ["db-0"], 1)
    assert (s["delete"], s["hold"]) == ("db-0", True)
    back = step([pod("db-0")], sts(1), "db-0", [], 1)
    assert back["completed"] and not back["delete"]


def test_a_lowered_hot_standby_setting_restarts_the_primary_first() -> None:
    """A standby with max_connections lower than its primary does not start: lowering it, the primary goes first."""
    lower = sts(settings={"max_connections": "150"})
    pods = [pod(n, OLD) for n in ALL]
    s = step(pods, lower, "db-0", ALL, 3)
    assert (s["delete"], s["hold"]) == ("db-0", True) and "max_connections" in s["message"]
    # raised: the replicas first, as usual
    assert step(pods, sts(settings={"max_connections": "250"}), "db-0", ALL, 3)["delete"] == "db-2"


def test_a_scale_down_moves_the_primary_below_the_new_count_first() -> None:
    s = step([pod(n) for n in ALL], sts(3), "db-2", ALL, 2)
    assert (s["replicas"], s["switchover_to"]) == (3, "db-0")
    assert step([pod(n) for n in ALL], sts(3), "db-1", ALL, 2)["replicas"] == 2


def test_a_cordoned_primary_node_moves_the_primary_to_another_node() -> None:
    pods = [pod("db-0", node="a"), pod("db-1", node="a"), pod("db-2", node="b")]
    s = step(pods, sts(), "db-0", ALL, 3, cordoned=["a"])
    assert s["switchover_to"] == "db-2"
    assert not step(pods, sts(), "db-0", ALL, 3, cordoned=["c"])["switchover_to"]


def test_a_statefulset_not_yet_observed_is_waited_for() -> None:
    stale = {**sts(), "status": {"observedGeneration": 1, "updateRevision": OLD}}
    s = step([pod(n, OLD) for n in ALL], stale, "db-0", ALL, 3)
    assert not s["delete"] and "new revision" in s["message"]
