"""Safety off the tested path, proven with rows on real PostgreSQL and the operator as deployed (deploy/rbac's
ServiceAccount, leader election, the roles' defaults): a failover chooses by WAL position and nothing switches it off,
a lost Lease or an empty volume never makes an empty or a second primary, a change of configuration and a scale-down
never take the primary without a switchover, and a restore into three servers completes in either replication mode.
Every acknowledged row must be there afterwards, and no two servers may ever have been able to take writes at once
(tests/writes.py: each server's own record, and a checker's polls)."""

from __future__ import annotations

import time

from tests.kube import Kube, explained_by_containers, wait_for
from tests.realnode import (
    DATABASE_LANE,
    NODE_LANE,
    POSTGRES_IMAGE,
    cut_off_from_the_api_server,
    freeze_postmaster,
    psql_in_server,
    ready_database,
    signal_in_server,
)
from tests.sampledb import GROUP, PLURAL, VERSION, backup, backup_status, condition, events, get, roles, wait_phase
from tests.writes import (
    Writer,
    assert_safe,
    kill_operator_mid_change,
    server_history,
    table_rows,
    under_writes,
)

SWITCHOVER = "sampledb.example.com/switchover-to"


def _patch(real: Kube, ns: str, name: str, body: dict) -> None:
    real.custom.patch_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, name, body)


def _uids(real: Kube, ns: str, name: str) -> dict[str, str]:
    pods = real.core.list_namespaced_pod(ns, label_selector=f"app.kubernetes.io/instance={name},"
                                                            "statefulset.kubernetes.io/pod-name").items
    return {p.metadata.name: p.metadata.uid for p in pods if not p.metadata.deletion_timestamp}


def _switch_over(real: Kube, ns: str, name: str, to: str) -> None:
    _patch(real, ns, name, {"metadata": {"annotations": {SWITCHOVER: to}}})
    wait_for(f"{to} to be the primary", lambda: (st := get(real, ns, name)["status"]).get("currentPrimary") == to
             and st.get("phase") in ("Ready", "Degraded"), timeout=300, interval=1)


def _server_log(real: Kube, ns: str, pod: str) -> str:
    """The server container's log, its previous container's first (a server that did not stop in time ended it)."""
    previous = real.kubectl("-n", ns, "logs", pod, "-c", "postgres", "--previous", check=False)
    return (previous.stdout if previous.returncode == 0 else "") + real.kubectl(
        "-n", ns, "logs", pod, "-c", "postgres", check=False).stdout


@DATABASE_LANE
def test_a_failover_as_deployed_promotes_the_most_advanced_replica_and_the_old_primary_rejoins_by_rewind(
        real: Kube, real_namespace: str, real_sampledb_operator) -> None:
    """Three servers in sync mode. First spec.storage.size is raised on a class that cannot grow volumes (local-path):
    it is refused in status, and switches nothing off. Then the lowest-ordinal replica falls behind (its WAL receiver
    frozen) and the primary hangs (its postmaster frozen); the operator is SIGKILLed once the Lease records the change
    and the next one leads once its lease has expired. The replica with the most WAL, read by exec, is promoted (the
    shipped RBAC used to forbid exec, and the lowest ordinal was promoted); the old primary comes back as a replica by
    pg_rewind, not a clone."""
    operator = real_sampledb_operator()
    ns = real_namespace
    old, servers, checker, writer = under_writes(real, ns, "ha", replicas=3)
    assert old == "ha-0"
    behind, ahead = "ha-1", "ha-2"
    # sync mode for real: each commit waits for one replica, either
    assert psql_in_server(real, ns, old, "select string_agg(sync_state, ',') from pg_stat_replication") == \
        "quorum,quorum"

    _patch(real, ns, "ha", {"spec": {"storage": {"size": "3Gi"}}})  # (the sample's volumes are 2Gi)
    refused = wait_for("the storage edit refused in status", lambda: (c := condition(get(real, ns, "ha"), "Degraded"))
                       .get("reason") == "StorageNotGrown" and c, timeout=120, interval=1)
    assert "StorageClass local-path cannot grow" in refused["message"] and "back to 2Gi" in refused["message"]
    assert get(real, ns, "ha")["status"]["phase"] == "Degraded"

    receiver = psql_in_server(real, ns, behind, "select pid from pg_stat_wal_receiver")
    assert receiver, f"{behind} is not streaming"
    signal_in_server(real, ns, behind, "STOP", receiver)
    try:
        writer.wait_for_more(20)  # acknowledged with the other replica: the frozen one misses them
        freeze_postmaster(real, ns, old)
        kill_operator_mid_change(real, ns, "ha", old, operator, real_sampledb_operator)
        wait_for(f"{ahead} to be the primary", lambda: get(real, ns, "ha")["status"].get("currentPrimary") == ahead,
                 timeout=300, interval=1)
    finally:
        signal_in_server(real, ns, behind, "CONT", receiver)
    failed_over = events(real, ns, "FailedOver")
    assert failed_over and f"promoted {ahead}" in failed_over[-1].message, [e.message for e in failed_over]
    assert "WAL positions: " in failed_over[-1].message
    writer.wait_for_more(30, timeout=300)
    with explained_by_containers(real, ns, "ha"):
        wait_for(f"{old} back as a replica", lambda: psql_in_server(
            real, ns, old, "select pg_is_in_recovery()", check=False) == "t", timeout=300, interval=2)
    log = _server_log(real, ns, old)
    assert "rewound: it follows the new primary" in log and "cloning the primary" not in log, log[-3000:]
    writes = writer.stop()
    assert assert_safe(real, ns, "ha", writes, checker.stop(), servers) == ahead
    # the storage edit can be taken back (the volumes' size is in status)
    _patch(real, ns, "ha", {"spec": {"storage": {"size": "2Gi"}}})
    wait_for("Degraded to clear", lambda: condition(get(real, ns, "ha"), "Degraded").get("status") == "False",
             timeout=120, interval=2)
    print(f"failover {old} → {ahead} (as deployed, operator killed half-way): longest write gap "
          f"{writes.longest_gap():.1f} s; {len(writes.acked)} rows acknowledged, {len(writes.failed)} attempts failed")


@DATABASE_LANE
def test_a_primary_cut_off_from_the_api_server_stops_within_its_term_and_a_replica_takes_over(
        real: Kube, real_namespace: str, real_sampledb_operator) -> None:
    """Three servers in sync mode; the primary pod's traffic to the API server is dropped (its kubelet, its replicas
    and its clients still reach it). Its Lease agent can no longer read the Lease, so within its term the primary
    stops taking writes; the operator sees it unready and promotes a replica; the old primary rejoins as a replica
    (its label comes through its kubelet). Healed, nothing changes back. Every acknowledged row is kept, and no two
    servers could take writes at once."""
    real_sampledb_operator()
    ns = real_namespace
    old, servers, checker, writer = under_writes(real, ns, "cut", replicas=3)
    agent = real.core.read_namespaced_pod(old, ns).spec.init_containers[0]
    assert agent.name == "lease-agent" and agent.restart_policy == "Always"
    writer.wait_for_more(10)
    with cut_off_from_the_api_server(real, ns, old):
        cut = time.time()
        stopped = wait_for(f"{old} to stop for its term", lambda: [
            at for at, what in server_history(real, ns, [old])[old] if what == "stopped" and at > cut], timeout=120,
            interval=1)
        new = wait_for("another primary", lambda: (p := get(real, ns, "cut")["status"].get("currentPrimary"))
                       not in (None, old) and p, timeout=300, interval=1)
        writer.wait_for_more(20, timeout=300)
        wait_for(f"{old} back as a replica", lambda: psql_in_server(
            real, ns, old, "select pg_is_in_recovery()", check=False) == "t", timeout=300, interval=2)
    assert stopped[0] - cut <= 15 + 5, (stopped, cut)  # within its term (and a fast shutdown)
    log = _server_log(real, ns, old)
    assert "no read of the Lease has named this server for 15s" in log, log[-3000:]
    assert "waiting in this container for the Lease to name this server again" in log, log[-3000:]
    agent_log = wait_for("the agent to read the Lease again", lambda: "can be read again" in (log := real.kubectl(
        "-n", ns, "logs", old, "-c", "lease-agent", check=False).stdout) and log, timeout=60, interval=2)
    assert "lease-agent: cannot read the Lease" in agent_log, agent_log
    writer.wait_for_more(10, timeout=120)
    writes = writer.stop()
    assert assert_safe(real, ns, "cut", writes, checker.stop(), servers) == new
    print(f"primary {old} cut off from the API server: stopped {stopped[0] - cut:.1f} s after (term 15 s), {new} "
          f"promoted; longest write gap {writes.longest_gap():.1f} s; {len(writes.acked)} rows acknowledged")


@DATABASE_LANE
def test_a_lost_lease_and_an_empty_volume_under_the_primary_make_no_empty_or_second_primary(
        real: Kube, real_namespace: str, real_sampledb_operator) -> None:
    """The primary's Lease is deleted while the database takes writes: the one server serving as the primary is
    recorded again, nothing changes hands. Then the primary's volume is replaced by an empty one (its PVC and pod
    deleted): the new server waits instead of initialising an empty primary, a replica with the data is promoted, and
    the new server clones it."""
    real_sampledb_operator()
    ns = real_namespace
    old, servers, checker, writer = under_writes(real, ns, "lost", replicas=3)
    real.coordination.delete_namespaced_lease("lost-primary", ns)
    recorded = wait_for("the Lease recorded again", lambda: events(real, ns, "PrimaryRecorded"), timeout=120)
    assert old in recorded[-1].message
    lease = wait_for("the Lease", lambda: real.coordination.read_namespaced_lease("lost-primary", ns), timeout=60)
    assert lease.spec.holder_identity == old
    writer.wait_for_more(20)
    assert get(real, ns, "lost")["status"]["currentPrimary"] == old and not events(real, ns, "FailedOver")

    real.core.delete_namespaced_persistent_volume_claim(f"data-{old}", ns)
    real.core.delete_namespaced_pod(old, ns)
    new = wait_for("another primary", lambda: (p := get(real, ns, "lost")["status"].get("currentPrimary"))
                   not in (None, old) and p, timeout=300, interval=1)
    assert events(real, ns, "FailedOver")
    writer.wait_for_more(30, timeout=300)
    wait_phase(real, ns, "lost", timeout=420)
    writes = writer.stop()
    assert assert_safe(real, ns, "lost", writes, checker.stop(), servers) == new
    # the new server on the empty volume never initialised a database and was never able to take writes
    assert [what for _, what in server_history(real, ns, [old])[old]] == []
    log = _server_log(real, ns, old)
    assert "initialising a new database" not in log and "cloning the primary" in log, log[-3000:]
    print(f"lost Lease: {old} kept; empty volume under {old}: {new} promoted; longest write gap "
          f"{writes.longest_gap():.1f} s; {len(writes.acked)} rows acknowledged")


@NODE_LANE  # (the other lane's, which would otherwise wait for this one at its end)
def test_a_configuration_change_and_a_scale_down_never_take_the_primary_without_a_switchover(
        real: Kube, real_namespace: str, real_sampledb_operator) -> None:
    """With the highest ordinal as the primary: a setting that needs a restart rolls the replicas first, then switches
    over to an updated replica, then restarts the old primary; a setting that does not is reloaded, nobody restarts;
    then spec.replicas 3 → 2 switches the primary below the new count before its server goes. Never a failover."""
    real_sampledb_operator()
    ns = real_namespace
    _, _, checker, writer = under_writes(real, ns, "roll", replicas=3)
    _switch_over(real, ns, "roll", "roll-2")
    before = _uids(real, ns, "roll")

    _patch(real, ns, "roll", {"spec": {"parameters": {"max_connections": "250"}}})
    wait_for("every server restarted on the new configuration", lambda: (
        now := _uids(real, ns, "roll")).keys() == before.keys() and all(now[p] != before[p] for p in now)
        and get(real, ns, "roll")["status"].get("phase") == "Ready", timeout=600, interval=2)
    primary = get(real, ns, "roll")["status"]["currentPrimary"]
    assert primary != "roll-2" and psql_in_server(real, ns, primary, "show max_connections") == "250"
    switched = events(real, ns, "SwitchedOver")
    assert any("to update the servers" in e.message for e in switched), [e.message for e in switched]
    assert not events(real, ns, "FailedOver")

    restarted = _uids(real, ns, "roll")
    _patch(real, ns, "roll", {"spec": {"parameters": {"max_connections": "250", "work_mem": "8MB"}}})
    wait_for("the reloaded setting", lambda: psql_in_server(real, ns, primary, "show work_mem", check=False) == "8MB",
             timeout=240, interval=2)
    assert _uids(real, ns, "roll") == restarted  # reloaded in place, nobody restarted

    _switch_over(real, ns, "roll", "roll-2")
    _patch(real, ns, "roll", {"spec": {"replicas": 2}})
    wait_for("two servers left, the primary among them", lambda: sorted(roles(real, ns, "roll")) == ["roll-0", "roll-1"]
             and get(real, ns, "roll")["status"].get("currentPrimary") in ("roll-0", "roll-1")
             and get(real, ns, "roll")["status"].get("phase") == "Ready", timeout=300, interval=1)
    assert not events(real, ns, "FailedOver") and not events(real, ns, "FailingOver")
    writer.wait_for_more(20, timeout=300)
    writes = writer.stop()
    assert_safe(real, ns, "roll", writes, checker.stop(), ["roll-0", "roll-1"])
    print(f"configuration change, then scale-down with the primary on the highest ordinal: longest write gap "
          f"{writes.longest_gap():.1f} s; {len(writes.acked)} rows acknowledged, {len(writes.failed)} attempts failed")


@NODE_LANE  # (the other lane's, which would otherwise wait for this one at its end)
def test_a_restore_into_three_servers_completes_in_either_replication_mode(
        real: Kube, real_namespace: str, real_sampledb_operator) -> None:
    """A backup restored into a new three-server database, sync (the default) and async: the restore does not wait
    for replicas that are still cloning, the replicas authenticate as the database's own replication role
    throughout, and every row acknowledged before the backup is on the new primary, streamed to both replicas."""
    real_sampledb_operator()
    ns = real_namespace
    ready_database(real, ns, "src", replicas=1)
    writer = Writer(real, ns, "src", POSTGRES_IMAGE)
    writer.wait_for_more(20)
    requested = time.time()
    backup(real, ns, "snap", database="src")
    st = wait_for("the backup", lambda: (s := backup_status(real, ns, "snap")).get("phase") in ("Completed", "Failed")
                  and s, timeout=300)
    assert st["phase"] == "Completed", st
    before = writer.stop().acked_before(requested)
    for mode in ("sync", "async"):
        name = f"copy-{mode}"
        started = time.time()
        db = ready_database(real, ns, name, replicas=3, replication={"mode": mode}, restoreFrom={"backup": "snap"})
        primary = db["status"]["currentPrimary"]
        assert before <= table_rows(real, ns, primary), f"{mode}: rows acknowledged before the backup are missing"
        wait_for(f"{mode}: both replicas streaming", lambda p=primary: psql_in_server(
            real, ns, p, "select count(*) from pg_stat_replication where state = 'streaming'", check=False) == "2",
            timeout=300, interval=2)
        states = psql_in_server(real, ns, primary, "select string_agg(sync_state, ',') from pg_stat_replication")
        assert states == ("quorum,quorum" if mode == "sync" else "async,async"), states
        for replica in (s for s in roles(real, ns, name) if s != primary):
            wait_for(f"{replica} to have the rows", lambda r=replica: before <= table_rows(real, ns, r),
                     timeout=120, interval=2)
        print(f"restore into three servers, {mode}: Ready in {time.time() - started:.0f} s")
