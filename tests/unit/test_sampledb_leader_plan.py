"""The leader role's decisions (roles/leader/filter_plugins/sampledb_leader.py): a change of primary fences the old
one before another is promoted; whom to promote comes from the servers' own state, and without it nobody is; a lost
or foreign Lease is rebuilt from the servers, never by promoting the lowest ordinal."""

from __future__ import annotations

import pytest

from tests.plugins import plugin

leader = plugin("roles/leader/filter_plugins/sampledb_leader.py")
# readiness as the role computes it, with the shared Jinja test
sampledb_ready = plugin("roles/common/test_plugins/sampledb.py").sampledb_ready

NOW = "2026-11-24T10:00:30Z"
LONG_AGO = "2026-11-24T10:00:00Z"
UID = "sdb-uid"


def pod(name: str, ready: bool = True, uid: str | None = None, running: bool = True, deleting: bool = False,
        role: str | None = "replica", restarts: int = 0) -> dict:
    state = {"running": {"startedAt": "2026-11-24T09:00:00Z"}} if running else {"terminated": {"exitCode": 0}}
    meta = {"name": name, "uid": uid or f"uid-{name}", "labels": {leader.ROLE_LABEL: role} if role else {}}
    if deleting:
        meta["deletionTimestamp"] = "2026-11-24T10:00:00Z"
    return {"metadata": meta, "status": {
        "phase": "Running", "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        "containerStatuses": [{"name": "postgres", "restartCount": restarts, "state": state}]}}


def primary(name: str = "db-0", **kw) -> dict:
    return pod(name, role="primary", **kw)


def lease(holder: str = "", uid: str = UID, **annotations: str) -> dict:
    if uid:
        annotations = {leader.DATABASE_UID: uid, **annotations}
    return {"metadata": {"annotations": annotations}, "spec": {"holderIdentity": holder or None}}


def unready_since(holder: str, since: str = LONG_AGO, **annotations: str) -> dict:
    return lease(holder, **{leader.UNREADY_SINCE: since, **annotations})


def fencing(old: str, new: str, since: str = "2026-11-24T10:00:20Z", reason: str = "failover") -> dict:
    return lease("", **{leader.FENCING: old, leader.FENCING_UID: f"uid-{old}", leader.FENCING_SINCE: since,
                        leader.PROMOTE: new, leader.REASON: reason})


def state(lsn: str = "0/3000000", timeline: int = 1, data: str = "yes", running: str = "yes",
          recovery: str = "yes", streaming: str = "yes", sysid: str = "7000", **kw: str) -> dict:
    return {"role": "replica", "data": data, "running": running, "recovery": recovery, "streaming": streaming,
            "sysid": sysid, "timeline": str(timeline), "lsn": lsn, "fenced": "yes", **kw}


def plan(pods, the_lease, **kw):
    ready = [p["metadata"]["name"] for p in pods if sampledb_ready(p)]
    kw = {"uid": UID, "database": "db", "quorum": 1, "initialized": True, **kw}
    kw.setdefault("replicas", max([int(p["metadata"]["name"].rsplit("-", 1)[1]) for p in pods] + [-1]) + 1)
    return leader.sampledb_leader_plan(pods, the_lease, NOW, ready, **kw)


# ---------------------------------------------------------------------------------------------- a new database

def test_a_new_database_is_initialised_by_its_first_server_on_the_operators_word() -> None:
    p = plan([pod("db-1", role=None), pod("db-0", ready=False, role=None)], {}, initialized=False)
    assert (p["target"], p["holder"], p["bootstrap"], p["changed"]) == ("db-0", "db-0", "db-0", False)
    assert p["annotations"][leader.DATABASE_UID] == UID


# ---------------------------------------------------------------------------------------------- a lost Lease

def test_a_lost_lease_is_recorded_again_for_the_one_server_serving_as_primary() -> None:
    p = plan([pod("db-0"), primary("db-1"), pod("db-2")], {})
    assert (p["target"], p["holder"], p["adopted"], p["bootstrap"], p["fencing"]) == ("db-1", "db-1", True, "", "")
    assert "recorded again" in p["message"]


@pytest.mark.parametrize("servers", [
    [pod("db-0"), pod("db-1"), pod("db-2")],                           # nobody labelled primary (re-created)
    [primary("db-0"), primary("db-1"), pod("db-2")],                   # two say primary
    [primary("db-0", ready=False), pod("db-1"), pod("db-2")],          # the primary does not serve
])
def test_a_lost_lease_fences_every_server_and_promotes_the_one_with_the_most_wal(servers) -> None:
    """Never the lowest ordinal by default: every server is labelled replica, their states are read, and the most
    advanced (timeline, then position) is promoted once none takes writes any more."""
    begun = plan(servers, {})
    assert (begun["target"], begun["holder"], begun["reason"], begun["began"]) == ("", "", "recovery", True)
    assert begun["demote"] == ["db-0", "db-1", "db-2"] and begun["read_states"] == ["db-0", "db-1", "db-2"]
    recovering = lease("", **begun["annotations"])
    still_writing = {"db-0": state("0/5000000", recovery="no"), "db-1": state("0/4000000", timeline=2),
                     "db-2": state("0/3000000")}
    p = plan(servers, recovering, states=still_writing)
    assert p["target"] == "" and "waiting for db-0 to stop taking writes" in p["message"]
    stopped = {**still_writing, "db-0": state("0/5000000", running="no", recovery="")}
    p = plan(servers, recovering, states=stopped)
    # db-1's timeline 2 supersedes db-0's history on timeline 1, however far that went
    assert (p["target"], p["holder"], p["changed"], p["reason"]) == ("db-1", "db-1", True, "recovery")
    assert "WAL positions: db-0 0/5000000 (timeline 1), db-1 0/4000000 (timeline 2)" in p["message"]
    assert set(p["annotations"]) >= {leader.DATABASE_UID} and p["annotations"][leader.REASON] == ""


def test_a_lost_lease_never_promotes_an_empty_server_or_another_databases_and_waits_for_every_state() -> None:
    servers = [pod("db-0"), pod("db-1")]
    recovering = lease("", **plan(servers, {})["annotations"])
    p = plan(servers, recovering, identity="7000",
             states={"db-0": state(data="no", running="no", lsn=""), "db-1": state("0/9", sysid="9999")})
    assert p["target"] == "" and "no server holds this database's data (system identifier 7000)" in p["blocked"]
    p = plan(servers, recovering, states={"db-0": state("0/9"), "db-1": {"error": "pods/exec is forbidden"}})
    assert p["target"] == "" and "db-1: pods/exec is forbidden" in p["blocked"]


def test_a_lease_left_by_an_earlier_database_of_that_name_is_not_this_ones() -> None:
    """A SampleDB deleted and created again before the garbage collector took its Lease: the Lease names a server
    of the old database (here one that does not exist) and carries the old UID."""
    old = lease("db-2", uid="earlier-uid", **{leader.FENCING: "db-1"})
    p = plan([pod("db-0", ready=False, role=None)], old, initialized=False)
    assert (p["target"], p["bootstrap"], p["fencing"]) == ("db-0", "db-0", "")
    assert p["annotations"][leader.DATABASE_UID] == UID and "earlier database's" in p["message"]


# ---------------------------------------------------------------------------------------------- failover

def test_a_healthy_primary_is_kept_and_its_lease_says_nothing_more() -> None:
    p = plan([primary("db-0"), pod("db-1")], lease("db-0"))
    assert p["target"] == "db-0" and not p["fencing"]
    assert {k: v for k, v in p["annotations"].items() if v} == {leader.DATABASE_UID: UID}


def test_since_when_the_primary_is_unready_lives_in_the_lease_and_the_grace_period_runs_from_it() -> None:
    pods = [primary("db-0", ready=False), pod("db-1")]
    first = plan(pods, lease("db-0"), grace_seconds=10)
    assert first["target"] == "db-0" and first["annotations"][leader.UNREADY_SINCE] == NOW
    recent = plan(pods, unready_since("db-0", "2026-11-24T10:00:25Z"), grace_seconds=10)
    assert recent["target"] == "db-0" and recent["annotations"][leader.UNREADY_SINCE] == "2026-11-24T10:00:25Z"
    assert plan(pods, unready_since("db-0"), grace_seconds=10)["fencing"] == "db-0"
    assert plan(pods, unready_since("db-0"), hold=True)["target"] == "db-0"
    # ready again: the record goes
    assert plan([primary("db-0"), pod("db-1")], unready_since("db-0"))["annotations"][leader.UNREADY_SINCE] == ""


def test_a_failover_fences_the_old_primary_before_anyone_is_promoted() -> None:
    pods = [primary("db-0", ready=False), pod("db-1"), pod("db-2")]
    p = plan(pods, unready_since("db-0"))
    assert (p["target"], p["holder"], p["fencing"], p["began"], p["changed"]) == ("", "", "db-0", True, False)
    assert p["annotations"][leader.FENCING_SINCE] == NOW and p["annotations"][leader.FENCING_UID] == "uid-db-0"
    assert p["demote"] == ["db-0", "db-1", "db-2"]


@pytest.mark.parametrize(("old", "fenced", "proven"), [
    (primary("db-0", ready=False), "", False),                           # still running, as it was
    (primary("db-0", ready=False, restarts=1), "", False),               # restarted: it may have read its old label
    (primary("db-0", ready=False), "db-1", False),                       # a mark on another pod proves nothing
    (primary("db-0", ready=False), "db-0", True),                        # its fence's mark, read by exec
    (primary("db-0", ready=False, running=False), "", False),            # stopped: restarted, it may read its old label
    (primary("db-0", ready=False, uid="another"), "", True),             # replaced by a new pod
])
def test_what_counts_as_fenced(old: dict, fenced: str, proven: bool) -> None:
    p = plan([old, pod("db-1")], fencing("db-0", "db-1"), fenced=fenced)
    assert (p["target"] == "db-1") is proven and p["changed"] is proven


def test_a_stopped_primary_is_deleted_at_once_and_fenced_when_its_pod_is_gone() -> None:
    """Its container will start again, and may read its old label before the kubelet writes the new one: its pod
    goes (the one made again waits for a label), then the replica is promoted."""
    stopped = primary("db-0", ready=False, running=False)
    p = plan([stopped, pod("db-1")], fencing("db-0", "db-1", since=NOW))
    assert (p["target"], p["evict"]) == ("", "db-0") and "its server is not running" in p["message"]
    p = plan([pod("db-1")], fencing("db-0", "db-1", since=NOW))
    assert (p["target"], p["changed"]) == ("db-1", True)


def termed(p: dict, term: int = 15, stop: int = 10) -> dict:
    """The pod's server enforces the primary's term (the StatefulSet's env, as the provision role renders it)."""
    env = [{"name": "LEASE_TERM_SECONDS", "value": str(term)}, {"name": "FENCE_STOP_SECONDS", "value": str(stop)}]
    return {**p, "spec": {"containers": [{"name": "postgres", "env": env}]}}


def test_the_lease_records_the_term_of_a_primary_first_labelled_while_there_are_several_servers() -> None:
    """Only such a primary is known to stop when no read of the Lease names it: one labelled primary while the
    database had a single server may not have seen the others' names yet (its kubelet may be the one cut off)."""
    new = plan([termed(pod("db-0", ready=False, role=None)), termed(pod("db-1", role=None))], {}, initialized=False)
    assert new["annotations"][leader.PRIMARY_TERM] == "uid-db-0 15 10"
    kept = plan([termed(primary("db-0")), termed(pod("db-1"))], lease("db-0", **{leader.PRIMARY_TERM: "uid-db-0 15 10"}))
    assert kept["annotations"][leader.PRIMARY_TERM] == "uid-db-0 15 10"
    # already labelled primary before the record (an operator upgraded under it, or a Lease adopted): none
    assert plan([termed(primary("db-0")), termed(pod("db-1"))], lease("db-0"))["annotations"][leader.PRIMARY_TERM] == ""
    # one server, a pod that enforces no term, a record of an earlier pod of that name: none
    assert plan([termed(pod("db-0", role=None))], {}, initialized=False)["annotations"][leader.PRIMARY_TERM] == ""
    assert plan([pod("db-0", role=None), pod("db-1", role=None)], {},
                initialized=False)["annotations"][leader.PRIMARY_TERM] == ""
    assert plan([termed(primary("db-0")), termed(pod("db-1"))], lease("db-0", **{
        leader.PRIMARY_TERM: "uid-earlier 15 10"}))["annotations"][leader.PRIMARY_TERM] == ""
    # scaled down to one server: the record goes (its server keeps running without the Lease)
    assert plan([termed(primary("db-0"))], lease("db-0", **{leader.PRIMARY_TERM: "uid-db-0 15 10"}),
                replicas=1)["annotations"][leader.PRIMARY_TERM] == ""


def test_a_primary_that_cannot_be_reached_counts_as_stopped_once_its_term_is_over() -> None:
    """Its node powered off, its kubelet dead or cut off: no fence's mark can be read and its pod still says Running
    (its kubelet cannot say otherwise). Once the term, the stop time and the margin have passed since the fence's
    write, the most advanced replica is promoted, without waiting for the pod's deletion (which may never end)."""
    pods = [termed(pod("db-0", ready=False)), termed(pod("db-1")), termed(pod("db-2"))]
    states = {"db-1": state("0/3000148"), "db-2": state("0/3A00000")}
    fenced = {**fencing("db-0", "db-1", since="2026-11-24T10:00:20Z")["metadata"]["annotations"],
              leader.PRIMARY_TERM: "uid-db-0 15 10"}
    first = plan(pods, lease("", **fenced), states=states)
    assert (first["target"], first["fencing"], first["evict"]) == ("", "db-0", "")
    assert first["annotations"][leader.FENCING_WRITTEN] == NOW and first["annotations"][leader.PRIMARY_TERM] == \
        "uid-db-0 15 10"
    assert "by 10:00:59 its term is over: that is proof enough" in first["message"]  # NOW + 1+15+10+3
    # 1 + 15 + 10 + 3 = 29 s after the recorded time: not a second before
    early = plan(pods, lease("", **{**fenced, leader.FENCING_WRITTEN: "2026-11-24T10:00:02Z"}), states=states)
    assert early["target"] == "" and not early["changed"] and early["fencing"] == "db-0"
    over = plan(pods, lease("", **{**fenced, leader.FENCING_WRITTEN: "2026-11-24T10:00:01Z"}), states=states)
    assert (over["target"], over["changed"], over["term_over"]) == ("db-2", True, True)
    assert ("db-0 cannot take writes any more (the Lease has named nobody since 10:00:01, and its term is over); "
            "promoted db-2") in over["message"]
    assert over["annotations"][leader.PRIMARY_TERM] == "uid-db-2 15 10"
    assert over["annotations"][leader.FENCING_WRITTEN] == ""
    events = leader.sampledb_leader_events(first, over)
    assert any(e["reason"] == "FailedOver" and "its term ran out" in e["message"] for e in events), events
    # a pod deleted whose deletion has not ended, or one not deleted at all: the term is proof either way
    going = termed(pod("db-0", ready=False, deleting=True))
    going["metadata"]["deletionTimestamp"] = "2026-11-24T10:00:31Z"
    for old in (going, termed(pod("db-0", ready=False))):
        p = plan([old, *pods[1:]], lease("", **{**fenced, leader.FENCING_WRITTEN: "2026-11-24T10:00:01Z"}),
                 states=states)
        assert (p["target"], p["term_over"]) == ("db-2", True), p["message"]
    # a margin of the role's choosing
    assert plan(pods, lease("", **{**fenced, leader.FENCING_WRITTEN: "2026-11-24T10:00:04Z"}), states=states,
                term_margin_seconds=0)["target"] == "db-2"
    # the fence timeout passed before the term is over (a longer term): its pod is deleted meanwhile
    long_fence = {**fenced, leader.FENCING_SINCE: LONG_AGO, leader.PRIMARY_TERM: "uid-db-0 60 10"}
    p = plan(pods, lease("", **{**long_fence, leader.FENCING_WRITTEN: "2026-11-24T10:00:01Z"}), states=states)
    assert (p["target"], p["evict"]) == ("", "db-0")
    # the eviction asked for after the run's wait (not by its first step) is told too
    began = {"began": True, "reason": "failover", "current": "db-0", "promote": "db-1", "evict": ""}
    evicting = leader.sampledb_leader_events(began, p)
    assert [e["reason"] for e in evicting] == ["FailingOver", "EvictingPrimary"], evicting


def test_the_fences_write_is_timed_once_after_it() -> None:
    began = plan([primary("db-0", ready=False), pod("db-1"), pod("db-2")], unready_since("db-0"))
    assert leader.sampledb_fence_written(began, NOW) == {leader.FENCING_WRITTEN: NOW}
    timed = {**began, "annotations": {**began["annotations"], leader.FENCING_WRITTEN: LONG_AGO}}
    assert leader.sampledb_fence_written(timed, NOW) == {}
    assert leader.sampledb_fence_written(plan([primary("db-0"), pod("db-1")], lease("db-0")), NOW) == {}


@pytest.mark.parametrize("record", ["", "uid-another 15 10", "uid-db-0 x 10"])
def test_no_term_counts_for_a_pod_not_recorded_as_enforcing_it(record: str) -> None:
    pods = [termed(pod("db-0", ready=False)), termed(pod("db-1")), termed(pod("db-2"))]
    # (long since: only the slower proof is left, the pod's deletion after the fence timeout)
    annotations = {**fencing("db-0", "db-1", since=LONG_AGO)["metadata"]["annotations"], leader.PRIMARY_TERM: record,
                   leader.FENCING_WRITTEN: "2026-11-24T09:00:00Z"}
    p = plan(pods, lease("", **annotations), states={"db-1": state("0/9"), "db-2": state("0/9")})
    assert p["target"] == "" and p["evict"] == "db-0" and "term" not in p["message"]


def test_in_sync_mode_the_sole_other_server_is_promoted_without_reading_it() -> None:
    """Two servers in sync mode: every acknowledged commit waited for the one replica, so it has them all."""
    p = plan([primary("db-0", running=False), pod("db-1")], fencing("db-0", "db-1"), fenced="db-0")
    assert (p["target"], p["changed"], p["read_states"]) == ("db-1", True, [])


def test_in_sync_mode_a_failover_promotes_the_most_advanced_once_every_position_is_known() -> None:
    """ANY 1 of two replicas: either may hold the last acknowledged commit, so both positions are read, and nobody
    is promoted while one of them cannot be (the shipped RBAC used to forbid exec: the lowest ordinal was promoted)."""
    pods = [pod("db-1"), pod("db-2")]  # db-0, the old primary, is gone
    first = plan(pods, fencing("db-0", "db-1"), replicas=3)
    assert (first["target"], first["read_states"]) == ("", ["db-1", "db-2"])
    chosen = plan(pods, fencing("db-0", "db-1"), replicas=3,
                  states={"db-1": state("0/3000148"), "db-2": state("0/3A00000")})
    assert (chosen["target"], chosen["changed"]) == ("db-2", True)
    assert chosen["message"].endswith("promoted db-2 (WAL positions: db-1 0/3000148 (timeline 1), "
                                      "db-2 0/3A00000 (timeline 1))")
    # among equals, the lowest ordinal
    assert plan(pods, fencing("db-0", "db-1"), replicas=3,
                states={"db-1": state("0/9"), "db-2": state("0/9")})["target"] == "db-1"
    blocked = plan(pods, fencing("db-0", "db-1"), replicas=3,
                   states={"db-1": state("0/9"), "db-2": {"error": "pods \"db-2\" is forbidden"}})
    assert blocked["target"] == "" and blocked["fencing"] == "db-0"
    assert "db-2: pods \"db-2\" is forbidden" in blocked["blocked"] and "in sync mode" in blocked["blocked"]
    # a server whose pod is gone for now may hold the last commit too
    gone = plan([pod("db-1")], fencing("db-0", "db-1"), replicas=3, states={"db-1": state("0/9")})
    assert gone["target"] == "" and "db-2: its pod does not exist" in gone["blocked"]
    # the most advanced must serve; a less advanced one is not promoted instead
    slow = plan([pod("db-1"), pod("db-2", ready=False)], fencing("db-0", "db-1"), replicas=3,
                states={"db-1": state("0/9"), "db-2": state("0/A")})
    assert slow["target"] == "" and "db-2, is not Ready" in slow["blocked"]


def test_a_primary_whose_ordinal_is_gone_for_good_is_replaced_at_once() -> None:
    """Scaled down while it was the primary (or a Lease naming a server of a bigger database): no grace period."""
    p = plan([pod("db-0"), pod("db-1")], lease("db-2"), replicas=2)
    assert (p["began"], p["fencing"], p["read_states"]) == (True, "db-2", ["db-0", "db-1"])
    p = plan([pod("db-0"), pod("db-1")], lease("", **p["annotations"]), replicas=2,
             states={"db-0": state("0/8"), "db-1": state("0/9")})
    assert (p["target"], p["changed"]) == ("db-1", True)


def test_no_ready_replica_means_no_fence() -> None:
    p = plan([primary("db-0", ready=False), pod("db-1", ready=False)], unready_since("db-0"))
    assert p["target"] == "db-0" and not p["fencing"] and "no replica is Ready" in p["message"]


def test_an_old_primary_that_does_not_stop_is_evicted_after_the_timeout() -> None:
    pods = [primary("db-0", ready=False), pod("db-1")]
    assert plan(pods, fencing("db-0", "db-1", since="2026-11-24T10:00:10Z"), fence_timeout_seconds=30)["evict"] == ""
    p = plan(pods, fencing("db-0", "db-1", since="2026-11-24T09:59:50Z"), fence_timeout_seconds=30)
    assert p["evict"] == "db-0" and p["target"] == ""


def test_a_new_pod_of_the_primarys_name_never_labelled_is_not_waited_for() -> None:
    """The primary's pod was deleted and the StatefulSet made a new one: unlabelled, it runs no server."""
    p = plan([pod("db-0", ready=False, uid="new", role=None), pod("db-1")], unready_since("db-0"))
    assert (p["target"], p["changed"], p["fencing"]) == ("db-1", True, "")


# ---------------------------------------------------------------------------------------------- async mode

def test_async_a_failover_begins_only_within_the_lag_bound_of_the_recorded_position() -> None:
    pods = [primary("db-0", ready=False), pod("db-1"), pod("db-2")]
    recorded = unready_since("db-0", **{leader.PRIMARY_LSN: "0/5000000"})
    assert plan(pods, recorded, quorum=0, max_lag=1048576)["read_states"] == ["db-1", "db-2"]
    far = {"db-1": state("0/3000000"), "db-2": state("0/4EFFFFF")}  # the most advanced is 1 MiB and 1 byte behind
    held = plan(pods, recorded, quorum=0, max_lag=1048576, states=far)
    assert (held["began"], held["target"], held["fencing"]) == (False, "db-0", "")
    assert "db-2, is 1048577 bytes behind its last recorded position 0/5000000" in held["blocked"]
    assert "maximumLagOnFailover: 1048576 bytes" in held["blocked"]
    ok = plan(pods, recorded, quorum=0, max_lag=1048576, states={**far, "db-1": state("0/4F00000")})
    assert (ok["began"], ok["promote"], ok["blocked"]) == (True, "db-1", "")
    # nothing recorded (exec was refused) or nothing read: fail closed
    assert "never recorded" in plan(pods, unready_since("db-0"), quorum=0, max_lag=0, states=far)["blocked"]
    unread = {"db-1": {"error": "forbidden"}, "db-2": {"error": "forbidden"}}
    assert "could be read" in plan(pods, recorded, quorum=0, max_lag=0, states=unread)["blocked"]


def test_async_the_primary_position_is_recorded_once_it_moved_a_quarter_of_the_bound() -> None:
    def record(recorded: str | None, lsn: str, max_lag=1048576, **kw) -> dict:
        the_lease = lease("db-0", **({leader.PRIMARY_LSN: recorded} if recorded else {}))
        line = f"role=primary running=yes recovery=no lsn={lsn}"
        return leader.sampledb_lsn_to_record(the_lease, {"stdout": line + "\n", "rc": 0, **kw}, max_lag)

    assert record(None, "0/3000148") == {leader.PRIMARY_LSN: "0/3000148"}
    assert record("0/3000000", "0/303FFFF") == {}  # a busy database's resync writes nothing
    assert record("0/3000000", "0/3040000") == {leader.PRIMARY_LSN: "0/3040000"}
    assert record("1/0", "0/3000000") == {leader.PRIMARY_LSN: "0/3000000"}  # a new history (major upgrade)
    assert record(None, "0/3000148", max_lag="") == {}  # sync mode
    assert record(None, "0/1", rc=2) == {} and record(None, "0/1", skipped=True) == {}


# ---------------------------------------------------------------------------------------------- switchover

def test_a_switchover_takes_only_a_replica_that_streams_and_is_close_behind() -> None:
    pods = [primary("db-0"), pod("db-1"), pod("db-2")]
    asked = plan(pods, lease("db-0"), requested="db-2")
    assert (asked["fencing"], asked["read_states"]) == ("", ["db-0", "db-2"])
    states = {"db-0": state("0/5000000", recovery="no", streaming="no"), "db-2": state("0/4F00000")}
    p = plan(pods, lease("db-0"), requested="db-2", states=states)
    assert (p["fencing"], p["promote"], p["reason"], p["refused"]) == ("db-0", "db-2", "switchover", "")
    not_streaming = plan(pods, lease("db-0"), requested="db-2", states={**states, "db-2": state(streaming="no")})
    assert not_streaming["fencing"] == "" and "db-2: it is not streaming" in not_streaming["refused"]
    behind = plan(pods, lease("db-0"), requested="db-2", states={**states, "db-2": state("0/1000000")},
                  switchover_max_lag=1 << 20)
    assert behind["fencing"] == "" and "bytes behind the primary" in behind["refused"]
    # the upgrade's switchover waits instead of being refused
    waits = plan(pods, lease("db-0"), switchover_to="db-2", states={**states, "db-2": state(streaming="no")})
    assert waits["fencing"] == "" and waits["refused"] == "" and "not streaming" in waits["blocked"]


def test_a_switchover_promotes_the_named_server_only_if_it_received_where_the_old_primary_stopped() -> None:
    pods = [primary("db-0"), pod("db-1"), pod("db-2")]
    in_change = fencing("db-0", "db-2", reason="switchover")
    p = plan(pods, in_change, fenced="db-0", fenced_lsn="0/5000000",
             states={"db-1": state("0/5000090"), "db-2": state("0/5000090")})
    assert (p["target"], p["reason"]) == ("db-2", "switchover")
    # it did not get the old primary's last record: the most advanced is promoted instead
    p = plan(pods, in_change, fenced="db-0", fenced_lsn="0/5000000",
             states={"db-1": state("0/5000090"), "db-2": state("0/4FFFFF0")})
    assert p["target"] == "db-1"
    # the mark read on another pod proves nothing
    assert plan(pods, in_change, fenced="db-1")["target"] == ""


def test_once_the_old_primary_stopped_a_switchover_reads_the_servers_its_check_did_not() -> None:
    """The check before the fence read the primary and its target only; the third server is read after it (never
    reported as a server whose pod does not exist), and the switchover ends in the same run."""
    pods = [primary("db-0"), pod("db-1"), pod("db-2")]
    in_change = fencing("db-0", "db-1", reason="switchover")
    checked = {"db-0": state("0/5000000", recovery="no"), "db-1": state("0/5000000")}
    p = plan(pods, in_change, fenced="db-0", fenced_lsn="0/5000000", states=checked)
    assert (p["target"], p["blocked"], p["read_states"]) == ("", "", ["db-1", "db-2"]), p["message"]
    p = plan(pods, in_change, fenced="db-0", fenced_lsn="0/5000000",
             states={**checked, "db-1": state("0/5000090"), "db-2": state("0/5000090")})
    assert (p["target"], p["reason"], p["blocked"]) == ("db-1", "switchover", "")


def test_a_switchover_to_the_sole_replica_in_sync_mode_needs_no_state() -> None:
    p = plan([primary("db-0"), pod("db-1")], lease("db-0"), requested="db-1")
    assert (p["fencing"], p["read_states"]) == ("db-0", [])


def test_a_requested_switchover_is_refused_unless_it_names_a_ready_server() -> None:
    pods = [primary("db-0"), pod("db-1", ready=False)]
    p = plan(pods, lease("db-0"), requested="db-7")
    assert p["refused"] == "db-7 is not a server of db (its servers: db-0, db-1)" and not p["fencing"]
    assert plan(pods, lease("db-0"), requested="db-1")["refused"] == "db-1 is not Ready"


# ---------------------------------------------------------------------------------------------- what the role writes

def test_the_servers_metadata_is_written_only_where_it_differs_demotions_first() -> None:
    pods = [primary("db-0"), pod("db-1", role=None), pod("db-2")]
    pods[2]["metadata"]["annotations"] = {"sampledb.example.com/servers": "db-0,db-1,db-2",
                                          "sampledb.example.com/bootstrap": "initdb"}
    p = {"target": "db-1", "demote": ["db-0", "db-2"], "bootstrap": ""}
    out = leader.sampledb_server_metadata(pods, p, {"servers": "db-0,db-1,db-2", "fence": "upgrade",
                                                    "synchronous-standby-names": "ANY 1 (*)"})
    assert [o["name"] for o in out] == ["db-0", "db-2", "db-1"]
    by = {o["name"]: o for o in out}
    assert by["db-0"]["labels"] == {leader.ROLE_LABEL: "replica"} and by["db-1"]["labels"] == {leader.ROLE_LABEL: "primary"}
    assert by["db-2"]["labels"] == {}
    assert by["db-2"]["annotations"] == {"sampledb.example.com/bootstrap": None,
                                         "sampledb.example.com/synchronous-standby-names": "ANY 1 (*)"}
    assert by["db-1"]["annotations"]["sampledb.example.com/fence"] == "upgrade"
    assert "sampledb.example.com/fence" not in by["db-0"]["annotations"]


def settled(pods, the_lease, metadata=None, **kw) -> bool:
    p = plan(pods, the_lease, **kw)
    return leader.sampledb_plan_settled(p, pods, the_lease, kw.get("requested", ""), kw.get("max_lag"),
                                        {"app": "db"}, metadata)


def test_a_run_that_changes_nothing_is_settled_and_anything_to_do_is_not() -> None:
    def servers() -> list[dict]:
        return [primary("db-0"), pod("db-1"), pod("db-2")]

    def recorded(holder: str = "db-0", **annotations: str) -> dict:
        the_lease = lease(holder, **annotations)
        the_lease["metadata"]["labels"] = {"app": "db"}
        return the_lease

    assert settled(servers(), recorded())
    assert not settled(servers(), recorded(), metadata=[{"name": "db-1"}])
    assert not settled([pod("db-0"), pod("db-1")], recorded())
    assert not settled(servers(), {})
    assert not settled(servers(), recorded("db-1"))
    assert not settled(servers(), recorded(**{leader.PROMOTE: "db-1"}))
    assert not settled(servers(), lease("db-0"))  # its labels gone
    # the primary turned unready: the Lease records since when
    assert not settled([primary("db-0", ready=False), pod("db-1")], recorded())
    assert settled([primary("db-0", ready=False), pod("db-1")], recorded(**{leader.UNREADY_SINCE: NOW}))
    assert not settled(servers(), recorded(), requested="db-1")
    assert not settled(servers(), recorded(), max_lag=1048576)


def test_state_sh_lines_and_exec_results() -> None:
    line = "role=replica data=yes standby=yes running=no recovery= streaming=no sysid=7 timeline=2 lsn=0/9 fenced=yes"
    assert leader.sampledb_state(line)["recovery"] == "" and leader.sampledb_state(line)["timeline"] == "2"
    results = [{"item": "db-1", "stdout": line + "\n", "rc": 0},
               {"item": "db-2", "failed": True, "msg": "pods \"db-2\" is forbidden"},
               {"item": "db-3", "skipped": True},
               {"item": "db-4", "failed": False, "msg": "no preferred addresses found"}]
    states = leader.sampledb_exec_states(results)
    assert states["db-1"]["lsn"] == "0/9" and states["db-2"] == {"error": "pods \"db-2\" is forbidden"}
    assert "db-3" not in states and states["db-4"] == {"error": "no preferred addresses found"}


@pytest.mark.parametrize(("text", "number"), [
    ("0/3000148", 0x3000148), ("16/B374D848", 0x16 << 32 | 0xB374D848), ("", None), (None, None), ("garbage", None)])
def test_wal_positions_are_read_as_postgresql_prints_them(text, number) -> None:
    assert leader.sampledb_lsn(text) == number


def test_a_new_database_is_given_its_first_server_before_any_pod_exists_and_keeps_the_word_until_initialised() -> None:
    """The first run may come before the StatefulSet's pods: the Lease names db-0 at once (had it waited, a database
    initialised in between would find its Lease missing and be recovered as lost). db-0's server is told to
    initialise until the database is, however long its container takes to start."""
    p = plan([], {}, initialized=False, replicas=2)
    assert (p["target"], p["holder"], p["bootstrap"]) == ("db-0", "db-0", "db-0")
    recorded = lease("db-0", **p["annotations"])
    for servers in ([pod("db-0", ready=False, role=None), pod("db-1", ready=False, role=None)],
                    [primary("db-0", ready=False), pod("db-1", ready=False)]):
        p = plan(servers, recorded, initialized=False)
        assert (p["target"], p["bootstrap"], p["fencing"], p["began"]) == ("db-0", "db-0", "", False)
        told = {m["name"]: m["annotations"] for m in leader.sampledb_server_metadata(servers, p, {})}
        assert told["db-0"].get("sampledb.example.com/bootstrap") == "initdb"
    initialised = primary("db-0")
    initialised["metadata"]["annotations"] = {"sampledb.example.com/bootstrap": "initdb"}
    p = plan([initialised, pod("db-1")], recorded, initialized=True)
    assert (p["target"], p["bootstrap"]) == ("db-0", "")
    told = leader.sampledb_server_metadata([initialised, pod("db-1")], p, {})
    assert told == [{"name": "db-0", "labels": {}, "annotations": {"sampledb.example.com/bootstrap": None}}]


def test_a_failovers_run_waits_until_the_old_primarys_term_is_over() -> None:
    """A lost node never shows its primary's stop: the run that fences waits until the term is over (and promotes
    then), not only failover_wait_seconds, and never longer than the fence timeout."""
    pods = [termed(pod("db-0", ready=False)), termed(pod("db-1")), termed(pod("db-2"))]
    fenced = {**fencing("db-0", "db-1", since=NOW)["metadata"]["annotations"], leader.PRIMARY_TERM: "uid-db-0 15 10",
              leader.FENCING_WRITTEN: NOW}
    p = plan(pods, lease("", **fenced))
    assert p["fencing"] == "db-0"
    # written at 10:00:30: over at 10:00:59 (1 + 15 + 10 + 3), what the role's wait compares the time with
    assert p["term_end"] == "2026-11-24T10:00:59Z"
    assert leader.sampledb_fence_wait(p, NOW, 15, 30) == 30  # 29 s + 1, within the fence timeout
    assert leader.sampledb_fence_wait(p, NOW, 15, 60) == 30
    assert leader.sampledb_fence_wait(p, "2026-11-24T10:00:50Z", 15, 30) == 15  # its own wait is longer
    assert leader.sampledb_fence_wait(p, "2026-11-24T10:01:30Z", 15, 30) == 15
    # no term known for that pod, one server, or nothing being fenced: the plain wait, and no term's end
    unknown = plan(pods, lease("", **{**fenced, leader.PRIMARY_TERM: "uid-another 15 10"}))
    assert unknown["term_end"] == "" and leader.sampledb_fence_wait(unknown, NOW, 15, 30) == 15
    alone = plan(pods, lease("", **fenced), replicas=1)
    assert alone["term_end"] == "" and leader.sampledb_fence_wait(alone, NOW, 15, 30) == 15
    # the run that begins the change keeps its usual wait: status then says FailingOver while the term runs
    began = plan([termed(primary("db-0", ready=False)), termed(pod("db-1")), termed(pod("db-2"))],
                 unready_since("db-0", **{leader.PRIMARY_TERM: "uid-db-0 15 10"}),
                 states={"db-1": state("0/9"), "db-2": state("0/9")})
    assert began["began"] and began["fencing"] == "db-0", began["message"]
    assert leader.sampledb_fence_wait({**began, "term_end": "2026-11-24T10:00:59Z"}, NOW, 15, 30) == 15
    settled = plan([termed(primary("db-0")), termed(pod("db-1"))], lease("db-0"))
    assert settled["term_end"] == "" and leader.sampledb_fence_wait(settled, NOW, 20, 30) == 20
