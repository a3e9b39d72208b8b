"""Continuous archiving's decisions (roles/common/filter_plugins/sampledb_archive.py and the status it leads to):
where a database's WAL goes, and what status says of the primary's report."""

from __future__ import annotations

import base64
import shlex

from tests.plugins import plugin
from tests.unit.test_sampledb_status import conditions, found

archive = plugin("roles/common/filter_plugins/sampledb_archive.py")
status = plugin("roles/status/filter_plugins/sampledb_status.py")
store_py = plugin("roles/provision/files/store.py")

STORE = {"endpointURL": "http://versitygw.objectstore.svc:7070/", "bucket": "sampledb",
         "credentials": {"secretName": "s3-keys"}}


def env_of(store: dict) -> dict[str, str]:
    return {k: shlex.split(v)[0] if shlex.split(v) else "" for k, v in
            (line.split("=", 1) for line in store["env"].splitlines())}


def test_the_archive_is_at_namespace_and_name_unless_a_path_is_given_each_major_apart() -> None:
    store = archive.sampledb_objectstore(STORE, "shop", "orders", "15.18")
    assert (store["url"], store["location"]) == ("s3://sampledb/shop/orders", "s3://sampledb/shop/orders/pg15")
    assert (store["secret"], store["access_key_key"], store["secret_key_key"]) == (
        "s3-keys", "ACCESS_KEY_ID", "ACCESS_SECRET_KEY")
    env = env_of(store)
    assert env["SAMPLEDB_S3_ENDPOINT"] == "http://versitygw.objectstore.svc:7070"
    assert env["SAMPLEDB_S3_URL"] == "s3://sampledb/shop/orders"
    assert env["SAMPLEDB_S3_COMPRESSION"] == "gzip" and env["SAMPLEDB_S3_REGION"] == "us-east-1"
    assert (env["SAMPLEDB_S3_CALL_SECONDS"], env["SAMPLEDB_STANDBY_HOLD_MB"]) == ("30", "1024")
    assert env["SAMPLEDB_S3_FIELD"] == "spec.backup.objectStore"  # (what the scripts' messages name)
    deep = archive.sampledb_objectstore({**STORE, "path": "team/a/orders", "compression": "none"}, "shop", "orders",
                                        "18.6", 512, 20)
    assert (deep["url"], deep["location"]) == ("s3://sampledb/team/a/orders", "s3://sampledb/team/a/orders/pg18")
    assert env_of(deep)["SAMPLEDB_S3_COMPRESSION"] == ""
    assert (env_of(deep)["SAMPLEDB_S3_CALL_SECONDS"], env_of(deep)["SAMPLEDB_STANDBY_HOLD_MB"]) == ("20", "512")
    assert archive.sampledb_objectstore({}, "shop", "orders") == {}
    assert archive.sampledb_objectstore(None, "shop", "orders") == {}


def test_the_keys_are_never_in_the_settings_the_servers_read() -> None:
    store = archive.sampledb_objectstore({**STORE, "credentials": {"secretName": "k", "accessKeyIdKey": "id",
                                                                    "secretAccessKeyKey": "sk"}}, "ns", "db")
    assert (store["access_key_key"], store["secret_key_key"]) == ("id", "sk")
    assert "id" not in env_of(store).values() and "sk" not in env_of(store).values()


def test_the_store_s_answer_names_the_field_to_fix() -> None:
    def said(code: str, detail: str = "x") -> str:
        return store_py.problem(code, detail, "spec.restoreFrom.objectStore", "orders", "http://s3.local:9000")

    assert said("SignatureDoesNotMatch", "The request signature\n we calculated").startswith(
        "spec.restoreFrom.objectStore.credentials: the object store at http://s3.local:9000 refused the keys "
        "(SignatureDoesNotMatch: The request signature we calculated)")
    assert said("InvalidAccessKeyId").startswith("spec.restoreFrom.objectStore.credentials: ")
    assert said("403").startswith("spec.restoreFrom.objectStore.credentials: ")  # (a HEAD's answer: no code)
    # (a store's own code for keys it does not take, by its HTTP status; versitygw's for a key it does not know)
    assert store_py.problem("UnknownUser", "No user", "f", "b", "s", 403).startswith("f.credentials: ")
    assert store_py.problem("XAdminUserNotFound", "No user", "f", "b", "s", 404).startswith("f.credentials: ")
    assert said("NoSuchBucket") == ("spec.restoreFrom.objectStore.bucket: there is no bucket orders at "
                                    "http://s3.local:9000: create it, or name one that exists (SampleDB does not "
                                    "create buckets)")
    assert said("", 'Could not connect to the endpoint URL: "http://s3.local:9000/orders?list-type=2"').startswith(
        "spec.restoreFrom.objectStore.endpointURL: the object store at http://s3.local:9000 does not answer (Could "
        "not connect to the endpoint URL): check the URL")
    assert said("AuthorizationHeaderMalformed").startswith("spec.restoreFrom.objectStore.region: ")
    assert said("NoCredentials").startswith("spec.restoreFrom.objectStore.credentials: no keys to sign with")
    assert said("InternalError", "y" * 500).startswith("spec.restoreFrom.objectStore: the object store at ")
    assert len(said("InternalError", "y" * 500)) < 250  # (the store's words shortened: the fix must show)


def test_the_store_s_answer_never_shows_the_keys_even_as_python_escapes_them(monkeypatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAEXAMPLE\r")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s3cr3t")
    said = store_py.problem("", "Invalid header value b'AWS4-HMAC-SHA256 Credential=AKIAEXAMPLE\\r/2026' s3cr3t", "f",
                            "b", "s")
    assert "AKIAEXAMPLE" not in said and "s3cr3t" not in said and "<access key id>" in said, said


def report(**fields: object) -> str:
    base = {"now": 1000, "last_ok": 990, "last_wal": "000000010000000000000003", "error_at": "", "error": "",
            "ready": 0, "oldest_ready": "", "destination": "s3://sampledb/ns/db/pg15", "archive_mode": "always"}
    base.update(fields)
    return " ".join(f"{k}={v}" for k, v in base.items())


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def test_the_primary_s_report_becomes_status_archive() -> None:
    ok = archive.sampledb_archive_report(report(ready=2, oldest_ready=955), "s3://sampledb/ns/db/pg15", "db-0")
    assert ok["healthy"] is True and ok["reason"] == "ArchivingWorks"
    assert ok["lastArchivedWal"] == "000000010000000000000003" and ok["lastArchivedAt"] == "1970-01-01T00:16:30Z"
    assert (ok["waitingSegments"], ok["lagSeconds"]) == (2, 45)
    assert "2 waiting" in ok["message"]
    # (where the primary checked and archives: for the operator, not status)
    assert ok["archivesTo"] == "" and archive.sampledb_archive_report(
        report(checked="s3://sampledb/ns/db/pg15"), "s3://x")["archivesTo"] == "s3://sampledb/ns/db/pg15"
    assert "archivesTo" not in status.sampledb_status(found(archive=ok))["status"]["archive"]
    unread = archive.sampledb_archive_report("", "s3://sampledb/ns/db", "db-0")
    assert unread["healthy"] is None and unread["reason"] == "NotRead" and "db-0" in unread["message"]
    assert archive.sampledb_archive_report(None, "s3://x/y")["message"] == "there is no primary to ask"


def test_a_failure_newer_than_the_last_success_is_reported_with_its_message() -> None:
    failing = archive.sampledb_archive_report(
        report(error_at=995, error=b64("Could not connect to the endpoint URL"), ready=1, oldest_ready=960),
        "s3://sampledb/ns/db")
    assert failing["healthy"] is False and failing["reason"] == "ArchivingFailing"
    assert "Could not connect to the endpoint URL" in failing["message"] and failing["lagSeconds"] == 40
    # a failure an upload since then made good is history
    assert archive.sampledb_archive_report(report(error_at=985, error=b64("boom")), "s3://x/y")["healthy"] is True
    taken = archive.sampledb_archive_report(
        report(last_ok="", last_wal="", error_at=995, error=b64("WAL archive check failed for server pg15: "
                                                                "Expected empty archive")), "s3://sampledb/ns/db")
    assert taken["reason"] == "ArchiveNotEmpty"
    # (the destination the primary reports: its own major's)
    assert taken["message"].startswith("spec.backup.objectStore.path: s3://sampledb/ns/db/pg15 already holds WAL of "
                                       "another database")
    # a failure the store's own answer pins on a field: that field first, with its own reason
    for field, reason in {"credentials": "CredentialsRefused", "bucket": "BucketMissing",
                          "endpointURL": "StoreUnreachable"}.items():
        said = f"spec.backup.objectStore.{field}: what is wrong"
        named = archive.sampledb_archive_report(report(error_at=995, error=b64(said)), "s3://sampledb/ns/db")
        assert (named["healthy"], named["reason"]) == (False, reason)
        assert named["message"] == f"{said} (archiving to s3://sampledb/ns/db/pg15)"
    # a failure that left no message is a failure all the same
    silent = archive.sampledb_archive_report(report(error_at=995, error=""), "s3://x/y")
    assert silent["healthy"] is False and silent["lastError"] == "failed without a message"


def test_a_primary_not_yet_restarted_with_archive_mode_is_not_archiving() -> None:
    pending = archive.sampledb_archive_report(report(archive_mode="off", last_ok="", last_wal=""), "s3://x/y")
    assert pending["healthy"] is None and pending["reason"] == "NotArchivingYet"  # (Unknown: the rollout is on it)
    assert "archive_mode=off" in pending["message"]


def test_status_has_continuous_archiving_only_while_an_object_store_is_set() -> None:
    healthy = archive.sampledb_archive_report(report(), "s3://sampledb/ns/db", "db-0")
    result = status.sampledb_status(found(archive=healthy))
    assert conditions(result)["ContinuousArchiving"] == ("True", "ArchivingWorks")
    assert result["status"]["archive"]["destination"] == "s3://sampledb/ns/db/pg15"
    assert "healthy" not in result["status"]["archive"]
    assert "ContinuousArchiving" not in conditions(status.sampledb_status(found()))
    # unset after it was reported: False, and status.archive removed
    was = {"phase": "Ready", "conditions": [{"type": "ContinuousArchiving", "status": "True"}]}
    unset = status.sampledb_status(found(status=was))
    assert conditions(unset)["ContinuousArchiving"] == ("False", "NotConfigured")
    assert unset["status"]["archive"] is None
    unread = archive.sampledb_archive_report("", "s3://sampledb/ns/db", "db-0")
    assert conditions(status.sampledb_status(found(archive=unread)))["ContinuousArchiving"] == ("Unknown", "NotRead")


def test_the_last_recoverability_point_is_the_newest_segment_archived_once_a_base_backup_ends_before_it() -> None:
    healthy = archive.sampledb_archive_report(report(), "s3://sampledb/ns/db", "db-0")
    assert "lastRecoverabilityPoint" not in status.sampledb_status(found(archive=healthy))["status"]
    backed_up = {"phase": "Ready", "firstRecoverabilityPoint": "1970-01-01T00:10:00.5+00:00"}
    result = status.sampledb_status(found(archive=healthy, status=backed_up))
    assert result["status"]["lastRecoverabilityPoint"] == healthy["lastArchivedAt"] == "1970-01-01T00:16:30Z"
    # (a segment archived before the only base backup ended is no point to recover to)
    later = {**backed_up, "firstRecoverabilityPoint": "1970-01-01T00:20:00+00:00"}
    assert "lastRecoverabilityPoint" not in status.sampledb_status(found(archive=healthy, status=later))["status"]
    # a backlog goes up oldest first: the archive reaches no further than the oldest segment still waiting
    backlog = {**healthy, "lastArchivedAt": "1970-01-01T00:40:00Z", "waitingSegments": 3, "lagSeconds": 900}
    result = status.sampledb_status(found(archive=backlog, status=backed_up, now="1970-01-01T00:45:00Z"))
    assert result["status"]["lastRecoverabilityPoint"] == "1970-01-01T00:30:00Z"
    # the object store removed: no point at all
    was = {**backed_up, "lastRecoverabilityPoint": "1970-01-01T00:16:30Z"}
    assert status.sampledb_status(found(status=was))["status"]["lastRecoverabilityPoint"] is None
    # the range is the archive's the last base backup went to: while the primary archives elsewhere (a major upgrade's
    # new database, a new path), there is none
    same = {**backed_up, "recoverableArchive": "s3://sampledb/ns/db/pg15"}
    assert status.sampledb_status(found(archive=healthy, status=same))["status"]["lastRecoverabilityPoint"] == \
        "1970-01-01T00:16:30Z"
    elsewhere = status.sampledb_status(found(archive={**healthy, "destination": "s3://sampledb/ns/db/pg18"},
                                             status=same))["status"]
    # (the range stays that archive's, which reaches no further than the change: not to the newest WAL elsewhere)
    assert "firstRecoverabilityPoint" not in elsewhere and elsewhere["lastRecoverabilityPoint"] is None
    # a range recorded before recoverableArchive was is the archive's the primary reports (not while upgrading)
    adopted = status.sampledb_status(found(archive=healthy, status=backed_up))["status"]
    assert adopted["recoverableArchive"] == "s3://sampledb/ns/db/pg15"
    assert "recoverableArchive" not in status.sampledb_status(found(archive=healthy, status=backed_up,
                                                                    upgrade_active=True))["status"]


def test_a_failing_archive_is_an_event_once_and_its_recovery_another() -> None:
    failing = archive.sampledb_archive_report(report(error_at=995, error=b64("AccessDenied")), "s3://b/ns/db")
    first = status.sampledb_status(found(archive=failing))
    assert conditions(first)["ContinuousArchiving"] == ("False", "ArchivingFailing")
    assert [e["reason"] for e in first["events"]] == ["ArchivingFailed"]
    again = status.sampledb_status(found(archive=failing, status={"phase": "Ready", "conditions": first["conditions"]}))
    assert again["events"] == []
    healthy = archive.sampledb_archive_report(report(), "s3://b/ns/db")
    resumed = status.sampledb_status(found(archive=healthy, status={"phase": "Ready", "conditions": first["conditions"]}))
    assert [e["reason"] for e in resumed["events"]] == ["ArchivingResumed"]


def test_a_missing_secret_is_named_in_continuous_archiving() -> None:
    unread = archive.sampledb_archive_report("", "s3://b/ns/db/pg15", "db-0")
    problem = "spec.backup.objectStore.credentials: no such Secret (Secret k in namespace ns): create it"
    result = status.sampledb_status(found(archive=unread, archive_problem=problem))
    assert conditions(result)["ContinuousArchiving"] == ("False", "CredentialsMissing")
    assert next(c for c in result["conditions"] if c["type"] == "ContinuousArchiving")["message"] == problem
    assert [e["reason"] for e in result["events"]] == ["ArchivingFailed"]


def test_a_primary_that_cannot_be_asked_keeps_what_it_last_said() -> None:
    was = {"phase": "Ready", "archive": {"destination": "s3://b/ns/db/pg15", "lagSeconds": 420, "waitingSegments": 3,
                                         "lastArchivedWal": "000000010000000000000003"}}
    unread = archive.sampledb_archive_report("", "s3://b/ns/db/pg15", "db-0")
    result = status.sampledb_status(found(archive=unread, status=was))
    assert result["status"]["archive"]["lagSeconds"] == 420 and result["status"]["archive"]["waitingSegments"] == 3


def test_a_gap_a_standby_left_before_its_promotion_is_reported_and_errors_clear_once_healthy() -> None:
    gap = archive.sampledb_archive_report(report(gap="000000010000000000000007"), "s3://b/ns/db/pg15")
    assert gap["healthy"] is False and gap["reason"] == "ArchiveGap"
    assert "may miss WAL from 000000010000000000000007" in gap["message"]
    healthy = archive.sampledb_archive_report(report(), "s3://b/ns/db/pg15")
    # (a merge patch of status removes what an earlier failure left)
    assert healthy["lastError"] is None and healthy["lastErrorAt"] is None and healthy["gapFrom"] is None
    was = {"phase": "Ready", "archive": {"destination": "s3://b/ns/db/pg15", "lastError": "boom"}}
    assert status.sampledb_status(found(archive=healthy, status=was))["status"]["archive"]["lastError"] is None
    unread = archive.sampledb_archive_report("", "s3://b/ns/db/pg15", "db-0")
    assert "destination" not in unread  # (the primary's own, last read, stands)


def test_a_recovery_reads_the_sources_archive_with_its_own_keys_and_the_target_as_postgresql_takes_it() -> None:
    own = archive.sampledb_objectstore(STORE, "shop", "orders-copy", "15.18")
    source = archive.sampledb_recovery_source(
        {"objectStore": {**STORE, "sourceName": "orders", "credentials": {"secretName": "old-keys"}},
         "targetTime": "2026-11-28T10:15:00.5Z"}, "shop", "15.18", own)
    assert (source["url"], source["location"], source["secret"]) == (
        "s3://sampledb/shop/orders", "s3://sampledb/shop/orders/pg15", "old-keys")
    assert source["keys_dir"] != own["keys_dir"] and "error" not in source
    env = env_of(source)
    assert env["SAMPLEDB_S3_KEYS"] == source["keys_dir"]
    assert env["SAMPLEDB_S3_FIELD"] == "spec.restoreFrom.objectStore"  # (what the recovery's messages name)
    # (PostgreSQL refuses a zone abbreviation, Z included, in recovery_target_time)
    assert env["SAMPLEDB_RECOVERY_TARGET_TIME"] == "2026-11-28 10:15:00.5+00:00"
    assert source["target"] == "targetTime 2026-11-28T10:15:00.5Z"
    path = archive.sampledb_recovery_source(
        {"objectStore": {**STORE, "path": "team/old"}, "targetLSN": "0/3000060", "backupID": "20261128T101500"},
        "shop", "15", own)
    assert path["url"] == "s3://sampledb/team/old"
    assert (env_of(path)["SAMPLEDB_RECOVERY_TARGET_LSN"], env_of(path)["SAMPLEDB_RECOVERY_BACKUP_ID"]) == (
        "0/3000060", "20261128T101500")
    everything = archive.sampledb_recovery_source({"objectStore": {**STORE, "sourceName": "orders"}}, "shop", "15", own)
    assert everything["target"] == "the end of its archived WAL"
    assert archive.sampledb_recovery_source({"backup": "nightly"}, "shop", "15", own) == {}


def test_a_recovery_from_the_archive_the_database_writes_to_is_refused_naming_the_field() -> None:
    own = archive.sampledb_objectstore(STORE, "shop", "orders", "15.18")
    same = archive.sampledb_recovery_source({"objectStore": {**STORE, "sourceName": "orders"}}, "shop", "15", own)
    assert "spec.restoreFrom.objectStore" in same["error"] and "s3://sampledb/shop/orders" in same["error"]
    elsewhere = archive.sampledb_recovery_source(
        {"objectStore": {**STORE, "endpointURL": "https://s3.example.com", "sourceName": "orders"}}, "shop", "15", own)
    assert "error" not in elsewhere


def test_a_retention_policy_is_barmans_recovery_window_and_only_set_when_asked() -> None:
    assert "SAMPLEDB_RETENTION_POLICY" not in env_of(archive.sampledb_objectstore(STORE, "shop", "orders", "15"))
    for policy, window in (("7d", "RECOVERY WINDOW OF 7 DAYS"), ("4w", "RECOVERY WINDOW OF 4 WEEKS"),
                           ("3m", "RECOVERY WINDOW OF 3 MONTHS")):
        store = archive.sampledb_objectstore(STORE, "shop", "orders", "15", retention_policy=policy)
        assert env_of(store)["SAMPLEDB_RETENTION_POLICY"] == window


def test_archiving_not_read_in_a_run_keeps_what_was_said_and_the_archive_fields() -> None:
    """A step that failed before archiving was read (the run is Degraded for it): no new Event, the condition and
    status.archive as they were."""
    failing = [{"type": "ContinuousArchiving", "status": "False", "reason": "ArchivingFailing", "message": "x"}]
    was = {"phase": "Ready", "conditions": failing, "archive": {"destination": "s3://b/ns/db/pg15", "lagSeconds": 9}}
    unread = {"healthy": None, "reason": "NotRead", "unread": True, "message": "not read"}
    result = status.sampledb_status(found(archive=unread, status=was))
    assert conditions(result)["ContinuousArchiving"] == ("False", "ArchivingFailing") and result["events"] == []
    assert result["status"]["archive"] == was["archive"]
