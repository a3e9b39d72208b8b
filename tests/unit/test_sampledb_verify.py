"""Restore drills (spec.backup.verify): what the newest drill that ended said
(roles/backup/filter_plugins/sampledb_base_backup.py), and what the database's status makes of it
(roles/status/filter_plugins/sampledb_status.py: status.lastVerifiedRecovery, the RecoveryVerified condition, Events)."""

from __future__ import annotations

import base64

from tests.plugins import plugin
from tests.unit.test_sampledb_status import conditions, found

verify = plugin("roles/backup/filter_plugins/sampledb_base_backup.py")
status = plugin("roles/status/filter_plugins/sampledb_status.py")

PASSED = "backup_id=20261128T040000 recovered_to=2026-11-28T04:05:09Z timeline=3 databases=3 seconds=41"


def job(name: str, state: str = "", at: str = "") -> dict:
    kinds = {"Passed": "Complete", "Failed": "Failed"}
    conds = [{"type": kinds[state], "status": "True", "lastTransitionTime": at}] if state else []
    st = {"conditions": conds, **({"completionTime": at, "succeeded": 1} if state == "Passed" else {})}
    return {"metadata": {"name": name, "ownerReferences": [{"kind": "CronJob", "name": "db-verify"}]}, "status": st}


def pod(job_name: str, message: str | None) -> dict:
    term = {"terminated": {"exitCode": 0, **({"message": message} if message is not None else {})}}
    return {"metadata": {"labels": {"batch.kubernetes.io/job-name": job_name}},
            "status": {"containerStatuses": [{"name": "verify", "state": term}]}}


def test_the_newest_drill_that_ended_is_reported_with_what_it_said() -> None:
    jobs = [job("db-verify-1", "Failed", "2026-11-27T04:00:30Z"), job("db-verify-2", "Passed", "2026-11-28T04:05:50Z"),
            job("db-verify-3")]  # (still running)
    pods = [pod("db-verify-1", "error=" + base64.b64encode(b"no completed base backup").decode()),
            pod("db-verify-2", PASSED), pod("db-verify-3", None)]
    assert verify.sampledb_verify_report(jobs, pods, "db-verify") == {
        "state": "Passed", "job": "db-verify-2", "endedAt": "2026-11-28T04:05:50Z", "backupId": "20261128T040000",
        "recoveredTo": "2026-11-28T04:05:09Z", "timeline": "3", "databases": "3", "seconds": "41"}
    failed = verify.sampledb_verify_report(jobs[:1], pods, "db-verify")
    assert failed == {"state": "Failed", "job": "db-verify-1", "endedAt": "2026-11-27T04:00:30Z",
                      "error": "no completed base backup"}
    # a pod killed without a word (out of memory, out of time): said so, with where to look
    silent = verify.sampledb_verify_report(jobs[:1], [pod("db-verify-1", None)], "db-verify")
    assert "left no message" in silent["error"] and "kubectl logs job/db-verify-1" in silent["error"]
    late = job("db-verify-1", "Failed", "2026-11-27T05:00:30Z")
    late["status"]["conditions"][0].update(reason="DeadlineExceeded", message="Job was active longer than specified")
    assert "(DeadlineExceeded: Job was active longer than specified)" in verify.sampledb_verify_report(
        [late], [], "db-verify")["error"]
    assert verify.sampledb_verify_report([job("db-verify-3")], pods, "db-verify") == {}
    assert verify.sampledb_verify_report([], [], "db-verify") == {}
    # a Job that only wears the label (not the CronJob's) says nothing
    forged = {**jobs[1], "metadata": {"name": "db-verify-2"}}
    assert verify.sampledb_verify_report([forged], pods, "db-verify") == {}


def test_a_passed_drill_is_recorded_and_a_failed_one_is_a_condition_and_an_event_once() -> None:
    passed = {**verify.sampledb_verify_report([job("db-verify-2", "Passed", "2026-11-28T04:05:50Z")],
                                              [pod("db-verify-2", PASSED)], "db-verify"), "configured": True}
    result = status.sampledb_status(found(verify=passed))
    assert conditions(result)["RecoveryVerified"] == ("True", "DrillPassed")
    assert result["status"]["lastVerifiedRecovery"] == {
        "time": "2026-11-28T04:05:50Z", "job": "db-verify-2", "backupId": "20261128T040000",
        "recoveredTo": "2026-11-28T04:05:09Z", "timeline": "3", "databases": "3", "seconds": "41"}
    assert result["events"] == [] and result["phase"] == "Ready"

    error = "error=" + base64.b64encode(b"barman-cloud-restore: Access Denied").decode()
    failed = {**verify.sampledb_verify_report([job("db-verify-3", "Failed", "2026-11-28T05:00:40Z")],
                                              [pod("db-verify-3", error)], "db-verify"), "configured": True}
    first = status.sampledb_status(found(verify=failed, status={"phase": "Ready", "conditions": result["conditions"]}))
    assert conditions(first)["RecoveryVerified"] == ("False", "DrillFailed")
    message = next(c["message"] for c in first["conditions"] if c["type"] == "RecoveryVerified")
    assert message == "restore drill db-verify-3 failed at 2026-11-28T05:00:40Z: barman-cloud-restore: Access Denied"
    assert [(e["reason"], e["type"]) for e in first["events"]] == [("RecoveryVerificationFailed", "Warning")]
    # (the last drill that passed stays on record; a failed drill is no failed run: the database stays Ready)
    assert "lastVerifiedRecovery" not in first["status"] and first["phase"] == "Ready"
    again = status.sampledb_status(found(verify=failed, status={"phase": "Ready", "conditions": first["conditions"]}))
    assert again["events"] == []
    back = status.sampledb_status(found(verify=passed, status={"phase": "Ready", "conditions": first["conditions"]}))
    assert [e["reason"] for e in back["events"]] == ["RecoveryVerified"]


def test_drills_configured_but_none_ended_yet_and_drills_switched_off() -> None:
    waiting = status.sampledb_status(found(verify={"configured": True}))
    assert conditions(waiting)["RecoveryVerified"] == ("Unknown", "NoDrillYet")
    assert "RecoveryVerified" not in conditions(status.sampledb_status(found()))
    off = status.sampledb_status(found(status={"phase": "Ready", "conditions": waiting["conditions"]}))
    assert conditions(off)["RecoveryVerified"] == ("False", "NotConfigured")


def test_drills_not_read_in_a_run_keep_what_was_said() -> None:
    """A step that failed before the drills were read (the run is Degraded for it) changes nothing they said."""
    failed = [{"type": "RecoveryVerified", "status": "False", "reason": "DrillFailed", "message": "restore drill x"}]
    kept = status.sampledb_status(found(verify={"configured": True, "unread": True},
                                        status={"phase": "Ready", "conditions": failed}))
    assert conditions(kept)["RecoveryVerified"] == ("False", "DrillFailed") and kept["events"] == []
    fresh = status.sampledb_status(found(verify={"configured": True, "unread": True}))
    assert conditions(fresh)["RecoveryVerified"] == ("Unknown", "NoDrillYet")
