"""Data safety on real PostgreSQL, proven with rows: a writer records every commit the server
acknowledged while an operation runs, and afterwards every acknowledged row must be there; a checker
polls every server and no two may accept writes at the same time (tests/writes.py)."""

from __future__ import annotations

import time

import pytest

from kubectl_sampledb.sql import lsn
from localcluster import images
from localcluster.cluster import LocalCluster
from tests.kube import Kube, wait_for
from tests.objectstore import STORE, keys_secret
from tests.realnode import (
    DATABASE_LANE,
    POSTGRES_IMAGE,
    delete_pod,
    freeze_postmaster,
    kill_postmaster,
    psql_in_server,
    ready_database,
    signal_in_server,
    thaw_postmaster,
    wait_sql,
)
from tests.sampledb import (
    GROUP,
    PLURAL,
    RARE_SCHEDULE,
    VERSION,
    backup,
    backup_named,
    backup_status,
    events,
    get,
    roles,
    wait_phase,
)
from tests.writes import Writer, assert_safe, kill_operator_mid_change, table_rows, under_writes

pytestmark = DATABASE_LANE


def test_a_backup_taken_while_writing_restores_every_row_acknowledged_before_it(
        real: Kube, real_namespace: str, real_sampledb_operator) -> None:
    real_sampledb_operator()
    ns = real_namespace
    ready_database(real, ns, "src", replicas=1)
    writer = Writer(real, ns, "src", POSTGRES_IMAGE)

    requested = time.time()
    backup(real, ns, "during", database="src")
    st = wait_for("the backup to complete", lambda: (
        s := backup_status(real, ns, "during")).get("phase") in ("Completed", "Failed") and s, timeout=300)
    assert st["phase"] == "Completed", st
    writer.wait_for_more(10)
    writes = writer.stop()
    before = writes.acked_before(requested)
    assert len(before) >= 5, "the writer had not written before the backup"

    restored = ready_database(real, ns, "copy", replicas=1, restoreFrom={"backup": "during"})
    copy = table_rows(real, ns, restored["status"]["currentPrimary"])
    missing = sorted(before - copy)
    assert not missing, f"{len(missing)} rows acknowledged before the backup are not in its restore: {missing[:20]}"
    # The copy is one consistent point in the source's history: exactly the source's rows up to its newest.
    source = table_rows(real, ns, get(real, ns, "src")["status"]["currentPrimary"])
    assert copy == {seq for seq in source if seq <= max(copy)}
    assert set(writes.acked) <= source, "the source lost acknowledged rows while being backed up"


def test_a_minor_upgrade_under_writes_loses_no_acknowledged_row_and_never_makes_two_primaries(
        real: Kube, real_namespace: str, real_sampledb_operator) -> None:
    """15.18 → 15.20: the replicas first, then a switchover to an upgraded one, then the old primary (the upgrade
    role's order). The operator is killed (SIGKILL) once the rollout has begun, and a new one carries on."""
    operator = real_sampledb_operator()
    ns = real_namespace
    old, new = images.POSTGRES_VERSIONS[0], images.POSTGRES_VERSIONS[1]
    assert old.split(".")[0] == new.split(".")[0]
    _, servers, checker, writer = under_writes(real, ns, "minor", replicas=3, version=old)

    real.custom.patch_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "minor", {"spec": {"version": new}})
    wait_for("the first server updated", lambda: any(
        p.spec.containers[0].image.endswith(f":{new}") for p in real.core.list_namespaced_pod(
            ns, label_selector="app.kubernetes.io/instance=minor,statefulset.kubernetes.io/pod-name").items),
        timeout=300, interval=1)
    operator.kill_group()
    real_sampledb_operator()
    wait_for(f"the database on {new} and Ready", lambda: (
        st := get(real, ns, "minor").get("status") or {}).get("version") == new and st.get("phase") == "Ready",
        timeout=600, interval=2)
    writer.wait_for_more(20, timeout=300)
    writes = writer.stop()
    primary = assert_safe(real, ns, "minor", writes, checker.stop(), servers)
    assert psql_in_server(real, ns, primary, "show server_version").startswith(new)
    # the primary was moved by a switchover, never by a failover
    switched = events(real, ns, "SwitchedOver")
    assert any("for the upgrade" in e.message for e in switched), [e.message for e in switched]
    assert not events(real, ns, "FailedOver")
    print(f"minor upgrade {old} → {new}: longest write gap {writes.longest_gap():.1f} s; "
          f"{len(writes.acked)} rows acknowledged, {len(writes.failed)} attempts failed")


def test_an_operator_killed_in_the_middle_of_a_switchover_is_finished_by_the_next_one(
        real: Kube, real_namespace: str, real_sampledb_operator) -> None:
    """SIGKILL once the Lease records the change in progress (the old primary fenced, nobody promoted yet): the
    next operator reads the Lease and promotes the named server once the old one has stopped. (The first one
    does not wait for the old primary within its run, so the change is still in progress when it is killed.)"""
    operator = real_sampledb_operator(switchover_wait_seconds=0)
    ns = real_namespace
    old, servers, checker, writer = under_writes(real, ns, "cut", replicas=3)
    wanted = next(p for p in reversed(servers) if p != old)

    real.custom.patch_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "cut", {"metadata": {"annotations": {
        "sampledb.example.com/switchover-to": wanted}}})
    kill_operator_mid_change(real, ns, "cut", old, operator, real_sampledb_operator)
    wait_for(f"{wanted} to be the primary", lambda: (
        st := get(real, ns, "cut")["status"]).get("currentPrimary") == wanted and st.get("phase") == "Ready",
        timeout=300, interval=1)
    writer.wait_for_more(20, timeout=300)
    writes = writer.stop()
    assert assert_safe(real, ns, "cut", writes, checker.stop(), servers) == wanted


@pytest.mark.parametrize("fault", [delete_pod, kill_postmaster], ids=["pod-deleted", "postmaster-killed"])
def test_a_primary_back_within_the_grace_period_stays_primary_and_loses_no_acknowledged_row(
        real: Kube, real_namespace: str, real_sampledb_operator, fault) -> None:
    """The primary's pod deleted, or its postmaster killed (the container restarts): it is back within the failover
    grace period (60 s here), so it stays the primary (no failover, nobody else ever writable) and nothing
    acknowledged is lost. (A failover is test_safety.py's.)"""
    real_sampledb_operator(failover_grace_seconds=60)
    ns = real_namespace
    old, servers, checker, writer = under_writes(real, ns, "ha", replicas=3)
    fault(real, ns, old)
    writer.wait_for_more(30, timeout=300)
    wait_phase(real, ns, "ha", timeout=300)
    writes = writer.stop()
    assert assert_safe(real, ns, "ha", writes, checker.stop(), servers) == old
    assert not events(real, ns, "FailedOver") and not events(real, ns, "FailingOver")
    print(f"{fault.__name__} {old}: back as the primary; longest write gap {writes.longest_gap():.1f} s; "
          f"{len(writes.acked)} rows acknowledged, {len(writes.failed)} attempts failed")


def test_async_a_failover_never_promotes_a_replica_further_behind_than_the_bound(
        real: Kube, real_namespace: str, real_sampledb_operator) -> None:
    """async mode: a replica whose stream stopped (its WAL receiver frozen) misses what the primary then writes;
    when the primary hangs, that replica is more than spec.replication.maximumLagOnFailover behind the primary's
    recorded position, so it is not promoted (FailoverBlocked) and the primary, once it answers again, still
    has every acknowledged row."""
    real_sampledb_operator()
    ns, bound = real_namespace, 65536
    old, servers, checker, writer = under_writes(
        real, ns, "lag", replicas=2, replication={"mode": "async", "maximumLagOnFailover": bound})
    replica = next(s for s in servers if s != old)
    receiver = psql_in_server(real, ns, replica, "select pid from pg_stat_wal_receiver")
    assert receiver, f"{replica} is not streaming"
    signal_in_server(real, ns, replica, "STOP", str(int(receiver)))
    try:
        # the replica misses this (async: the primary does not wait for it)
        psql_in_server(real, ns, old, "create table filler as select g, repeat('x', 200) from generate_series(1, 3000) g")
        behind = lsn(psql_in_server(real, ns, old, "select pg_current_wal_lsn()"))
        assert behind - lsn(psql_in_server(real, ns, replica, "select pg_last_wal_receive_lsn()")) > bound
        # any run records the primary's position (here one asked for by an annotation, as a resync would)
        real.kubectl("-n", ns, "annotate", "sdb", "lag", "--overwrite", f"test.sampledb.example.com/poke={behind}")
        wait_for("the primary's WAL position in the Lease", lambda: lsn(
            (real.coordination.read_namespaced_lease("lag-primary", ns).metadata.annotations or {}).get(
                "sampledb.example.com/primary-lsn", "0/0")) >= behind, timeout=120, interval=1)

        freeze_postmaster(real, ns, old)
        blocked = wait_for("a FailoverBlocked Event", lambda: events(real, ns, "FailoverBlocked"), timeout=240,
                           interval=1)
        assert f"the most advanced, {replica}, is " in blocked[-1].message, blocked[-1].message
        assert "maximumLagOnFailover: 65536 bytes" in blocked[-1].message
        lease = real.coordination.read_namespaced_lease("lag-primary", ns)
        assert lease.spec.holder_identity == old and roles(real, ns, "lag")[replica] == "replica"
        assert not events(real, ns, "FailedOver") and not events(real, ns, "FailingOver")
    finally:
        thaw_postmaster(real, ns, old)
        signal_in_server(real, ns, replica, "CONT", str(int(receiver)))

    wait_phase(real, ns, "lag", timeout=300)
    writer.wait_for_more(30, timeout=300)
    writes = writer.stop()
    assert assert_safe(real, ns, "lag", writes, checker.stop(), servers) == old
    # the replica streams again and catches up
    wait_sql(real, ns, replica, "select count(*) from filler", "3000", timeout=180)
    print(f"async, bound {bound} B: {blocked[-1].message}; {len(writes.acked)} rows acknowledged, none lost")


def test_a_major_upgrade_under_writes_keeps_every_acknowledged_row(
        real: Kube, real_namespace: str, local: LocalCluster, real_sampledb_operator) -> None:
    """15 → 18 by dump and load: the old server is fenced (only the superuser and the replicas may connect, every
    other session ended) before the dump, and the new one until the dump is loaded, so a write is either refused or in
    the new version.
    The operator is killed (SIGKILL) while the dump runs, and a new one carries on.
    Archiving to the object store goes on, in the new major's own archive beside the old one's, which gets a base
    backup of its own at once: the recoverable range starts again there."""
    operator = real_sampledb_operator()
    ns = real_namespace
    old, new = images.POSTGRES_VERSIONS[0], images.POSTGRES_VERSIONS[-1]
    assert old.split(".")[0] != new.split(".")[0]
    keys_secret(real, ns)
    _, servers, checker, writer = under_writes(real, ns, "mj", replicas=2, version=old,
                                               backup={"schedule": RARE_SCHEDULE, "objectStore": STORE})
    writer.wait_for_more(10)
    backup(real, ns, "mj-base", database="mj")  # (physical: the old major's archive gets a base backup)
    wait_for("the old major's base backup", lambda: backup_status(real, ns, "mj-base").get("phase") == "Completed"
             and get(real, ns, "mj")["status"].get("recoverableArchive"), timeout=420, interval=3)

    asked = time.time()
    real.custom.patch_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "mj",
                                               {"spec": {"version": new, "upgrade": {"allowMajor": True}}})
    wait_for("the migration dump Job", lambda: [j for j in real.batch.list_namespaced_job(ns).items
                                                if "-migrate-" in j.metadata.name], timeout=300, interval=1)
    operator.kill_group()
    real_sampledb_operator()
    wait_for(f"the database on {new} and Ready", lambda: (
        st := get(real, ns, "mj").get("status") or {}).get("version") == new and st.get("phase") == "Ready",
        timeout=900, interval=2)
    done = time.time()
    writer.wait_for_more(20, timeout=300)
    writes = writer.stop()
    primary = assert_safe(real, ns, "mj", writes, checker.stop(), servers)
    assert psql_in_server(real, ns, primary, "show server_version").startswith(new)
    refused = [seq for seq, why in writes.reasons.items() if "pg_hba.conf rejects connection" in why]
    assert refused, "the writer was never refused: the fence was not seen"
    # The new major archives apart (its WAL names begin again), and its first base backup is taken for it.
    based = wait_for("the new major's base backup", lambda: (
        st := backup_status(real, ns, n) if (n := backup_named(real, ns, "mj", "NewArchive")) else {}).get(
        "phase") in ("Completed", "Failed") and st, timeout=420, interval=3)
    new_major = new.split(".")[0]
    assert (based["phase"], based["method"]) == ("Completed", "physical"), based
    assert f"/{ns}/mj/pg{new_major}/base/" in based["location"], based
    assert (local.node.layout.objectstore / "sampledb" / ns / "mj" / f"pg{new_major}" / "base" / based["backupId"]
            ).is_dir(), based
    recoverable = wait_for("the recoverable range of the new major", lambda: (
        (st := get(real, ns, "mj")["status"]).get("firstRecoverabilityPoint") and st.get("lastRecoverabilityPoint")
        and st.get("recoverableArchive", "").endswith(f"/pg{new_major}")
        and (st.get("archive") or {}).get("destination") == st["recoverableArchive"] and st), timeout=240, interval=5)
    archiving = next(c for c in recoverable["conditions"] if c["type"] == "ContinuousArchiving")
    assert archiving["status"] == "True", archiving
    assert recoverable["firstRecoverabilityPoint"] >= time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(done - 120)), \
        recoverable
    print(f"major upgrade {old} → {new}: {done - asked:.1f} s asked → Ready; write downtime (longest gap) "
          f"{writes.longest_gap():.1f} s; {len(writes.acked)} rows acknowledged, {len(writes.failed)} attempts failed "
          f"({len(refused)} refused by the fence)")
