"""The leader role's decisions (roles/leader/filter_plugins/sampledb_leader.py): a change of primary
fences the old one before the new one is promoted, and what counts as fenced."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

_ROLES = Path(__file__).resolve().parents[2] / "roles"


def _plugin(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


leader = _plugin("sampledb_leader", _ROLES / "leader" / "filter_plugins" / "sampledb_leader.py")
# readiness as the role computes it, with the shared Jinja test
sampledb_ready = _plugin("sampledb_tests", _ROLES / "common" / "test_plugins" / "sampledb.py").sampledb_ready

NOW = "2026-11-24T10:00:30Z"


def pod(name: str, ready: bool = True, uid: str | None = None, started: str = "2026-11-24T09:00:00Z",
        running: bool = True, deleting: bool = False) -> dict:
    state = {"running": {"startedAt": started}} if running else {"terminated": {"exitCode": 0}}
    meta = {"name": name, "uid": uid or f"uid-{name}", "labels": {leader.ROLE_LABEL: "replica"}}
    if deleting:
        meta["deletionTimestamp"] = "2026-11-24T10:00:00Z"
    return {"metadata": meta, "status": {
        "phase": "Running", "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        "containerStatuses": [{"name": "postgres", "restartCount": 0, "state": state}]}}


def lease(holder: str = "", **annotations: str) -> dict:
    return {"metadata": {"annotations": annotations}, "spec": {"holderIdentity": holder or None}}


def fencing(old: str, new: str, since: str = "2026-11-24T10:00:20Z", reason: str = "failover") -> dict:
    return lease("", **{leader.FENCING: old, leader.FENCING_UID: f"uid-{old}", leader.FENCING_SINCE: since,
                        leader.PROMOTE: new, leader.REASON: reason})


def plan(pods, the_lease, **kw):
    ready = [p["metadata"]["name"] for p in pods if sampledb_ready(p)]
    return leader.sampledb_leader_plan(pods, the_lease, NOW, ready, **kw)


def test_the_first_server_becomes_primary_at_first_start() -> None:
    p = plan([pod("db-1"), pod("db-0", ready=False)], {})
    assert (p["target"], p["holder"], p["changed"]) == ("db-0", "db-0", False)


def test_a_healthy_primary_is_kept_and_nothing_is_recorded() -> None:
    p = plan([pod("db-0"), pod("db-1")], lease("db-0"))
    assert p["target"] == "db-0" and not p["fencing"] and set(p["annotations"].values()) == {""}


def test_an_unready_primary_is_kept_within_the_grace_period_or_while_held() -> None:
    pods = [pod("db-0", ready=False), pod("db-1")]
    assert plan(pods, lease("db-0"), unready_since="2026-11-24T10:00:25Z", grace_seconds=10)["target"] == "db-0"
    assert plan(pods, lease("db-0"), unready_since="2026-11-24T10:00:00Z", hold=True)["target"] == "db-0"


def test_failover_fences_a_running_primary_first_and_promotes_nobody() -> None:
    """The old primary is unready but its server still runs: nobody is primary until it has stopped."""
    pods = [pod("db-0", ready=False), pod("db-1"), pod("db-2")]
    p = plan(pods, lease("db-0"), unready_since="2026-11-24T10:00:00Z", grace_seconds=10)
    assert (p["target"], p["holder"], p["fencing"], p["promote"]) == ("", "", "db-0", "db-1")
    assert p["began"] and not p["changed"] and p["reason"] == "failover"
    assert p["annotations"][leader.FENCING_SINCE] == NOW and p["annotations"][leader.FENCING_UID] == "uid-db-0"


def test_a_terminating_primary_is_not_fenced_until_its_pod_is_gone() -> None:
    deleting = [pod("db-0", deleting=True), pod("db-1")]
    assert plan(deleting, fencing("db-0", "db-1"))["target"] == ""
    gone = [pod("db-1")]
    p = plan(gone, fencing("db-0", "db-1"))
    assert (p["target"], p["holder"], p["changed"], p["fencing"]) == ("db-1", "db-1", True, "")
    assert set(p["annotations"].values()) == {""}


@pytest.mark.parametrize(("old", "fenced"), [
    (pod("db-0", ready=False), False),                                     # still running, as it was
    (pod("db-0", ready=False, started="2026-11-24T10:00:20Z"), False),     # started in the fence's second
    (pod("db-0", ready=False, started="2026-11-24T10:00:25Z"), True),      # restarted since: read its label
    (pod("db-0", ready=False, running=False), True),                       # its server has stopped
    (pod("db-0", ready=False, uid="another"), True),                       # replaced by a new pod
])
def test_what_counts_as_fenced(old: dict, fenced: bool) -> None:
    p = plan([old, pod("db-1")], fencing("db-0", "db-1"))
    assert (p["target"] == "db-1") is fenced and p["changed"] is fenced


def test_a_switchover_waits_in_its_run_for_the_fence_the_plan_began() -> None:
    """The leader role waits within a switchover's run until the old primary has stopped (sampledb_plan_fenced
    with the pod's uid and the fence's start as the plan recorded them), then plans again and promotes."""
    begun = plan([pod("db-0"), pod("db-1")], lease("db-0"), switchover_to="db-1", switchover_reason="switchover")
    assert begun["fencing"] == "db-0" and begun["annotations"][leader.FENCING_SINCE] == NOW
    assert not leader.sampledb_plan_fenced([pod("db-0"), pod("db-1")], begun)
    restarted = pod("db-0", ready=False, started="2026-11-24T10:00:31Z")
    assert leader.sampledb_plan_fenced([restarted, pod("db-1")], begun)
    assert leader.sampledb_plan_fenced([pod("db-1")], begun)
    assert not leader.sampledb_plan_fenced([pod("db-1")], plan([pod("db-0"), pod("db-1")], lease("db-0")))


def test_a_switchover_promotes_once_the_old_primarys_server_marked_its_stop_before_its_pod_shows_it() -> None:
    """fenced.sh saw the old primary's fence mark (its server stopped for its replica label) while its pod still
    shows the server running and Ready: the run promotes at once. A mark seen on another pod counts for nothing."""
    pods = [pod("db-0"), pod("db-1"), pod("db-2")]
    begun = plan(pods, lease("db-0"), requested="db-2", database="db")
    in_change = lease("", **begun["annotations"])
    assert plan(pods, in_change)["target"] == ""
    for other in ("", "db-1", "db-2"):
        p = plan(pods, in_change, fenced=other)
        assert (p["target"], p["fencing"], p["changed"]) == ("", "db-0", False), other
    p = plan(pods, in_change, fenced="db-0")
    assert (p["target"], p["fencing"], p["changed"], p["reason"]) == ("db-2", "", True, "switchover")


def test_a_primary_already_gone_is_replaced_in_the_same_run() -> None:
    p = plan([pod("db-1"), pod("db-2")], lease("db-0"), unready_since="2026-11-24T10:00:00Z")
    assert (p["target"], p["changed"], p["began"], p["current"]) == ("db-1", True, True, "db-0")


def test_no_ready_replica_means_no_fence() -> None:
    p = plan([pod("db-0", ready=False), pod("db-1", ready=False)], lease("db-0"),
             unready_since="2026-11-24T10:00:00Z")
    assert p["target"] == "db-0" and not p["fencing"] and "no replica is Ready" in p["message"]


def test_an_old_primary_that_does_not_stop_is_evicted_after_the_timeout() -> None:
    pods = [pod("db-0", ready=False), pod("db-1")]
    assert plan(pods, fencing("db-0", "db-1", since="2026-11-24T10:00:10Z"), fence_timeout_seconds=30)["evict"] == ""
    p = plan(pods, fencing("db-0", "db-1", since="2026-11-24T09:59:50Z"), fence_timeout_seconds=30)
    assert p["evict"] == "db-0" and p["target"] == ""


def test_the_chosen_server_gone_unready_another_ready_one_is_promoted() -> None:
    p = plan([pod("db-1", ready=False), pod("db-2")], fencing("db-0", "db-1"))
    assert p["target"] == "db-2"


def test_a_switchover_fences_a_healthy_primary_then_promotes_the_named_server() -> None:
    pods = [pod("db-0"), pod("db-1"), pod("db-2")]
    p = plan(pods, lease("db-0"), requested="db-2", database="db")
    assert (p["target"], p["fencing"], p["promote"], p["reason"]) == ("", "db-0", "db-2", "switchover")
    assert p["refused"] == ""
    stopped = [pod("db-0", ready=False, started="2026-11-24T10:00:32Z"), pod("db-1"), pod("db-2")]
    p = plan(stopped, lease("", **p["annotations"]))
    assert (p["target"], p["changed"], p["reason"]) == ("db-2", True, "switchover")


def test_a_switchover_to_an_unready_server_or_the_primary_itself_does_nothing() -> None:
    pods = [pod("db-0"), pod("db-1", ready=False)]
    assert plan(pods, lease("db-0"), switchover_to="db-1")["fencing"] == ""
    assert plan(pods, lease("db-0"), switchover_to="db-0")["fencing"] == ""


def test_a_new_pod_of_the_primarys_name_never_labelled_is_not_waited_for() -> None:
    """The primary's pod was deleted and the StatefulSet made a new one: unlabelled, it runs no server."""
    new_pod = pod("db-0", ready=False, uid="new")
    del new_pod["metadata"]["labels"]
    p = plan([new_pod, pod("db-1")], lease("db-0"), unready_since="2026-11-24T10:00:00Z")
    assert (p["target"], p["changed"], p["fencing"]) == ("db-1", True, "")


def test_a_requested_switchover_is_refused_unless_it_names_a_ready_server() -> None:
    pods = [pod("db-0"), pod("db-1", ready=False)]
    p = plan(pods, lease("db-0"), requested="db-7", database="db")
    assert p["refused"] == "db-7 is not a server of db (its servers: db-0, db-1)" and not p["fencing"]
    p = plan(pods, lease("db-0"), requested="db-1", database="db")
    assert p["refused"] == "db-1 is not Ready" and not p["fencing"]


def test_the_upgrade_roles_switchover_waits_for_its_server_instead_of_being_refused() -> None:
    pods = [pod("db-0", ready=False), pod("db-1")]
    p = plan(pods, lease("db-1"), switchover_to="db-0")
    assert (p["refused"], p["fencing"], p["target"]) == ("", "", "db-1")
    p = plan([pod("db-0"), pod("db-1")], lease("db-1"), switchover_to="db-0")
    assert (p["fencing"], p["promote"], p["reason"]) == ("db-1", "db-0", "upgrade")


def test_a_failover_promotes_the_most_advanced_replica_once_the_old_primary_has_stopped() -> None:
    """The replica that received the most WAL has every commit a synchronous primary acknowledged: it is
    promoted, whichever was named when the fence began; among equals, the lowest ordinal."""
    pods = [pod("db-1"), pod("db-2"), pod("db-3")]  # db-0, the old primary, is gone
    behind_first = {"db-1": "0/3000148", "db-2": "0/3A00000", "db-3": "0/3A00000"}
    chosen = plan(pods, fencing("db-0", "db-1"), positions=behind_first)
    assert chosen["target"] == "db-2"
    assert chosen["message"].endswith("promoted db-2 (WAL positions: db-1 0/3000148, db-2 0/3A00000, db-3 0/3A00000)")
    assert plan(pods, fencing("db-0", "db-1"), positions={"db-1": "1/0", "db-3": "0/FFFFFFFF"})["target"] == "db-1"
    # a replica whose position could not be read is promoted only if nothing else is known
    assert plan(pods, fencing("db-0", "db-1"), positions={"db-1": "", "db-3": "0/10"})["target"] == "db-3"
    assert plan(pods, fencing("db-0", "db-1"), positions={})["target"] == "db-1"
    # a switchover promotes the server the user named (the old primary stopped cleanly: it has everything)
    assert plan(pods, fencing("db-0", "db-1", reason="switchover"), positions=behind_first)["target"] == "db-1"


@pytest.mark.parametrize(("text", "number"), [
    ("0/3000148", 0x3000148), ("16/B374D848", 0x16 << 32 | 0xB374D848), ("", None), (None, None), ("garbage", None)])
def test_wal_positions_are_read_as_postgresql_prints_them(text, number) -> None:
    assert leader.sampledb_lsn(text) == number


def test_only_exec_results_that_ran_and_succeeded_count_as_positions() -> None:
    results = [{"item": "db-1", "stdout": "0/3000148\n", "rc": 0},
               {"item": "db-2", "failed": True, "msg": "exec is not possible here"},
               {"item": "db-3", "stdout": "", "stderr": "psql: error", "rc": 2},
               {"item": "db-4", "skipped": True},
               {"item": "db-5", "failed": False, "msg": "no preferred addresses found"}]  # failed_when: false
    assert leader.sampledb_exec_output(results) == {"db-1": "0/3000148"}
    assert leader.sampledb_exec_errors(results) == [
        "db-2: exec is not possible here", "db-3: psql: error", "db-5: no preferred addresses found"]


def test_async_a_failover_waits_for_a_replica_within_the_lag_bound() -> None:
    """async mode: no replica further behind the primary's recorded position than maximumLagOnFailover is
    promoted; the primary is kept (it comes back with its data) and the plan says why."""
    pods = [pod("db-0", ready=False), pod("db-1"), pod("db-2")]
    since = "2026-11-24T10:00:00Z"
    recorded = lease("db-0", **{leader.PRIMARY_LSN: "0/5000000"})
    # not read yet: the failover may begin, so that the role reads the positions
    assert plan(pods, recorded, unready_since=since, max_lag=1048576)["began"]
    far = {"db-1": "0/3000000", "db-2": "0/4EFFFFF"}  # the most advanced is 1 MiB and 1 byte behind
    held = plan(pods, recorded, unready_since=since, max_lag=1048576, positions=far)
    assert (held["began"], held["target"], held["fencing"], held["holder"]) == (False, "db-0", "", "db-0")
    assert held["blocked"] == held["message"]
    assert "db-2, is 1048577 bytes behind its last recorded position 0/5000000" in held["blocked"]
    assert "maximumLagOnFailover: 1048576 bytes" in held["blocked"]
    # within the bound (or a larger bound): the most advanced is chosen
    ok = plan(pods, recorded, unready_since=since, max_lag=1048576, positions={**far, "db-1": "0/4F00000"})
    assert (ok["began"], ok["promote"], ok["blocked"]) == (True, "db-1", "")
    assert plan(pods, recorded, unready_since=since, max_lag=2 << 20, positions=far)["promote"] == "db-2"
    # no position could be read: none is known to be within the bound
    assert "no replica's WAL position could be read" in plan(pods, recorded, unready_since=since, max_lag=0,
                                                             positions={})["blocked"]
    # sync mode (no bound) or nothing recorded yet: the failover goes on
    assert plan(pods, recorded, unready_since=since, max_lag="", positions=far)["began"]
    assert plan(pods, lease("db-0"), unready_since=since, max_lag=0, positions=far)["began"]


def test_async_the_primary_position_is_recorded_once_it_moved_a_quarter_of_the_bound() -> None:
    def record(recorded: str | None, stdout: str, max_lag=1048576, **result) -> dict:
        the_lease = lease("db-0", **({leader.PRIMARY_LSN: recorded} if recorded else {}))
        return leader.sampledb_lsn_to_record(the_lease, {"stdout": stdout + "\n", "rc": 0, **result}, max_lag)

    assert record(None, "0/3000148") == {leader.PRIMARY_LSN: "0/3000148"}
    assert record("0/3000000", "0/303FFFF") == {}  # a busy database's resync writes nothing
    assert record("0/3000000", "0/3040000") == {leader.PRIMARY_LSN: "0/3040000"}
    assert record("1/0", "0/3000000") == {leader.PRIMARY_LSN: "0/3000000"}  # a new history (major upgrade)
    assert record("0/3000000", "0/3000001", max_lag=0) == {leader.PRIMARY_LSN: "0/3000001"}
    assert record(None, "0/3000148", max_lag="") == {}  # sync mode
    assert record(None, "", rc=2) == {} and record(None, "0/1", skipped=True) == {}


def labelled(p: dict, role: str) -> dict:
    p["metadata"]["labels"][leader.ROLE_LABEL] = role
    return p


SELECTOR = {"app.kubernetes.io/instance": "db"}


def settled(pods, the_lease, requested: str = "", max_lag=None, **kw) -> bool:
    return leader.sampledb_plan_settled(plan(pods, the_lease, requested=requested, database="db", **kw), pods,
                                        the_lease, requested, max_lag, SELECTOR)


def test_a_run_that_changes_nothing_is_settled_and_anything_to_do_is_not() -> None:
    def servers() -> list[dict]:
        return [labelled(pod("db-0"), "primary"), pod("db-1"), pod("db-2")]

    def recorded(holder: str = "db-0", **annotations: str) -> dict:
        return {**lease(holder, **annotations), "metadata": {"labels": dict(SELECTOR), "annotations": annotations}}

    assert settled(servers(), recorded())
    # an unready primary within its grace period: nothing to do yet
    assert settled([labelled(pod("db-0", ready=False), "primary"), pod("db-1")], recorded(),
                   unready_since="2026-11-24T10:00:25Z")
    # a label to write: the primary's, a replica's, a new pod's
    assert not settled([pod("db-0"), pod("db-1")], recorded())
    assert not settled([labelled(pod("db-0"), "primary"), labelled(pod("db-1"), "primary")], recorded())
    new = pod("db-2")
    del new["metadata"]["labels"][leader.ROLE_LABEL]
    assert not settled([*servers()[:2], new], recorded())
    # the Lease to write: none yet, another holder, a change still recorded, its labels gone
    assert not settled(servers(), {})
    assert not settled(servers(), recorded("db-1"))
    assert not settled(servers(), recorded(**{leader.PROMOTE: "db-1"}))
    assert not settled(servers(), lease("db-0"))
    # a failover due, a switchover asked for (done, refused, or by the upgrade), async mode's position to record
    assert not settled([labelled(pod("db-0", ready=False), "primary"), pod("db-1")], recorded(),
                       unready_since="2026-11-24T10:00:00Z")
    assert not settled(servers(), recorded(), requested="db-1")
    assert not settled(servers(), recorded(), requested="db-0")
    assert not settled(servers(), recorded(), requested="db-9")
    assert not settled(servers(), recorded(), switchover_to="db-2")
    assert not settled(servers(), recorded(), max_lag=1048576)
