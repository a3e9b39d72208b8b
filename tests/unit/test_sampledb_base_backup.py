"""Physical backups' decisions (roles/backup/filter_plugins/sampledb_base_backup.py): the method a backup takes, the
server it copies, and what its Job's termination log says of it."""

from __future__ import annotations

import base64

from tests.plugins import plugin

backup = plugin("roles/backup/filter_plugins/sampledb_base_backup.py")
STORE = {"url": "s3://sampledb/shop/orders"}


def pod(name: str, role: str = "replica", ready: bool = True, deleting: bool = False) -> dict:
    meta = {"name": name, "labels": {"sampledb.example.com/role": role}}
    if deleting:
        meta["deletionTimestamp"] = "2026-11-28T06:00:00Z"
    return {"metadata": meta, "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


def test_physical_by_default_with_an_object_store_and_a_dump_without_one() -> None:
    assert backup.sampledb_backup_method("", STORE, "orders") == {"method": "physical", "error": ""}
    assert backup.sampledb_backup_method(None, {}, "orders") == {"method": "dump", "error": ""}
    assert backup.sampledb_backup_method("dump", STORE, "orders") == {"method": "dump", "error": ""}


def test_a_physical_backup_of_a_database_without_an_object_store_names_the_field_and_the_fix() -> None:
    refused = backup.sampledb_backup_method("physical", {}, "orders")
    assert refused["method"] == "physical"
    assert refused["error"].startswith("spec.method: physical needs an object store")
    assert "SampleDB orders" in refused["error"] and "spec.backup.objectStore" in refused["error"]
    assert "method dump" in refused["error"]


def test_the_backup_copies_the_first_ready_replica_else_the_primary() -> None:
    pods = [pod("db-2"), pod("db-0", "primary"), pod("db-1", ready=False)]
    assert backup.sampledb_backup_source(pods, "db-0") == "db-2"
    assert backup.sampledb_backup_source([pod("db-1"), pod("db-2")], "db-0") == "db-1"
    # a replica going away, or not Ready, is not copied: the primary is
    assert backup.sampledb_backup_source([pod("db-0", "primary"), pod("db-1", deleting=True)], "db-0") == "db-0"
    assert backup.sampledb_backup_source([pod("db-0", "primary"), pod("db-1", ready=False)], "db-0") == "db-0"
    # (a pod not labelled yet is no replica)
    assert backup.sampledb_backup_source([pod("db-0", "primary"), pod("db-1", role="")], "db-0") == "db-0"
    assert backup.sampledb_backup_source([], "") == ""
    # a final backup: the fenced primary, whose last write a replica may not have replayed yet
    assert backup.sampledb_backup_source(pods, "db-0", from_replica=False) == "db-0"


def test_the_jobs_report_becomes_the_backups_status() -> None:
    said = ("id=20261128T060000 begin_lsn=0/5000028 end_lsn=0/5000138 begin_wal=000000010000000000000005 "
            "end_wal=000000010000000000000005 timeline=1 begin_time=2026-11-28T06:00:00+00:00 "
            "end_time=2026-11-28T06:00:09+00:00 size=31616512 status=DONE server=orders-1")
    assert backup.sampledb_base_backup_report([said]) == {
        "backupId": "20261128T060000", "beginLSN": "0/5000028", "endLSN": "0/5000138",
        "beginWal": "000000010000000000000005", "endWal": "000000010000000000000005", "timeline": "1",
        "beginTime": "2026-11-28T06:00:00+00:00", "endTime": "2026-11-28T06:00:09+00:00", "bytes": "31616512",
        "server": "orders-1"}
    # a retry that succeeded after one that failed: the success
    failed = "error=" + base64.b64encode(b"could not connect to server").decode()
    assert backup.sampledb_base_backup_report([said, failed])["backupId"] == "20261128T060000"


def test_a_failed_backups_error_is_read_back_and_nothing_is_made_up() -> None:
    failed = "error=" + base64.b64encode(b"Bucket 'nope' does not exist").decode()
    assert backup.sampledb_base_backup_report([failed]) == {"error": "Bucket 'nope' does not exist"}
    assert backup.sampledb_base_backup_report(["error=%%%"]) == {"error": "the backup failed without a message"}
    assert backup.sampledb_base_backup_report([]) == {}
    assert backup.sampledb_base_backup_report(["size=12"]) == {}


def test_the_retention_policy_report_goes_to_the_database_and_the_records_of_backups_it_deleted_go() -> None:
    said = ("id=20261128T101500 name=n.u status=DONE oldest_kept=20261127T003000 "
            "first_recoverability=2026-11-27T00:30:09+00:00 retention_error=" + base64.b64encode(b"no answer").decode())
    report = backup.sampledb_base_backup_report([said])
    assert (report["oldestKept"], report["firstRecoverabilityPoint"], report["retentionError"]) == (
        "20261127T003000", "2026-11-27T00:30:09+00:00", "no answer")
    here = "s3://sampledb/shop/orders/pg15/base/"
    records = [{"metadata": {"name": n}, "status": {"method": m, "phase": p, "location": where + (i or ""),
                                                    **({"backupId": i} if i else {})}}
               for n, m, p, i, where in [
                   ("old", "physical", "Completed", "20261126T003000", here),
                   ("kept", "physical", "Completed", "20261127T003000", here),
                   ("dump", "dump", "Completed", "", "pvc://orders-backups/orders/dump.sql.gz"),
                   ("failed", "physical", "Failed", "20261125T003000", here),
                   ("no-id", "physical", "Completed", "", here),
                   # (another archive: the database's path changed, or its major version)
                   ("other-path", "physical", "Completed", "20261101T003000", "s3://sampledb/team/orders/pg15/base/"),
                   ("older-major", "physical", "Completed", "20261101T003000", "s3://sampledb/shop/orders/pg14/base/")]]
    latest = here + "20261128T101500"
    gone = backup.sampledb_backups_pruned_by_store(records, "20261127T003000", latest)
    assert [r["metadata"]["name"] for r in gone] == ["old"]
    assert backup.sampledb_backups_pruned_by_store(records, "", latest) == []
