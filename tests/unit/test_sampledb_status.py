"""What a SampleDB's status says (roles/status/filter_plugins/sampledb_status.py), from what the other roles
found: the phase, conditions, status fields, Events and when to look again."""

from __future__ import annotations

from typing import Any

from tests.plugins import plugin

filters = plugin("roles/status/filter_plugins/sampledb_status.py")

NOW = "2026-11-26T03:00:00Z"
REQUEUE = {"fence": "1s", "health": "3s", "progress": "5s"}


def found(**changes: Any) -> dict[str, Any]:
    """A Ready 3-server database in which nothing changes, as the status role gathers it (2.18 hands some
    values over as text: "3", "True")."""
    base: dict[str, Any] = {
        "name": "db", "status": {"phase": "Ready"}, "now": NOW, "desired": 3, "ready": "3", "initialized": "True",
        "bootstrap_state": "Succeeded", "running_version": "16", "upgrade_active": False, "upgrade_completed": False,
        "upgrade_from": "16", "upgrade_to": "16", "upgrade_message": "", "upgrade_failure": "",
        "restore_state": "", "restore_message": "", "restore_failure": "",
        "leader_plan": {"target": "db-0", "fencing": "", "changed": False, "promote": "", "reason": "", "message": ""},
        "leader_ready": ["db-0", "db-1", "db-2"], "leader_hold": False, "lease_name": "db-primary",
        "unready_since": "", "backup_in_progress": False, "requeue": REQUEUE}
    base.update(changes)
    return base


def conditions(result: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in result["conditions"]}


def test_a_healthy_database_is_ready_and_says_nothing_new() -> None:
    result = filters.sampledb_status(found())
    assert result["phase"] == "Ready"
    assert result["status"] == {
        "phase": "Ready", "version": "16", "readyReplicas": 3, "readyReplicasText": "3/3", "initialized": True,
        "currentPrimary": "db-0", "targetPrimary": None, "primaryLease": "db-primary", "primaryUnreadySince": None,
        "upgrade": None, "archive": None}
    assert conditions(result) == {"Ready": ("True", "Serving"), "Progressing": ("False", "Stable"),
                                  "Degraded": ("False", "AllServersHealthy")}
    assert result["events"] == [] and result["requeue_after"] == ""


def test_a_fenced_primary_is_a_failover_looked_at_every_second() -> None:
    plan = {"target": "", "fencing": "db-0", "changed": False, "promote": "db-1", "reason": "failover",
            "message": "stopping db-0"}
    result = filters.sampledb_status(found(leader_plan=plan, leader_ready=["db-1", "db-2"],
                                           unready_since="2026-11-26T02:59:00Z"))
    assert result["phase"] == "FailingOver"
    assert result["status"]["currentPrimary"] is None and result["status"]["targetPrimary"] == "db-1"
    assert result["status"]["primaryUnreadySince"] is None  # the failover has begun
    assert conditions(result)["Ready"] == ("False", "PrimaryNotReady")
    assert result["conditions"][1]["message"] == "stopping db-0"
    assert result["requeue_after"] == "1s"


def test_an_unready_primary_keeps_its_time_and_is_watched() -> None:
    plan = {"target": "db-0", "fencing": "", "changed": False, "promote": "", "reason": "", "message": "",
            "annotations": {"sampledb.example.com/primary-unready-since": "2026-11-26T02:59:00Z"}}
    result = filters.sampledb_status(found(leader_ready=["db-1", "db-2"], ready="2", leader_plan=plan))
    assert result["phase"] == "FailingOver"
    assert result["status"]["primaryUnreadySince"] == "2026-11-26T02:59:00Z"
    assert result["requeue_after"] == "3s"
    held = filters.sampledb_status(found(leader_ready=["db-1", "db-2"], ready="2", leader_hold=True))
    assert held["phase"] == "Ready" and conditions(held)["Degraded"] == ("True", "ServersNotReady")
    assert held["requeue_after"] == "3s"  # a server is missing: watched, not left to the reconcile period


def test_a_switchover_is_named_so() -> None:
    plan = {"target": "db-1", "fencing": "", "changed": True, "promote": "", "reason": "switchover",
            "message": "db-1 is primary"}
    result = filters.sampledb_status(found(leader_plan=plan))
    assert result["phase"] == "SwitchingOver"
    assert conditions(result)["Progressing"] == ("True", "SwitchingOver")


def test_a_failed_bootstrap_fails_and_is_told_once() -> None:
    first = filters.sampledb_status(found(initialized="False", bootstrap_state="Failed",
                                          status={"phase": "Provisioning"}))
    assert first["phase"] == "Failed"
    message = "the bootstrap Job db-init failed; see kubectl logs job/db-init"
    assert first["conditions"][0] == {"type": "Ready", "status": "False", "reason": "Failed", "message": message}
    assert first["events"] == [{"reason": "BootstrapFailed", "type": "Warning", "message": message}]
    again = filters.sampledb_status(found(initialized="False", bootstrap_state="Failed", status={"phase": "Failed"}))
    assert again["phase"] == "Failed" and again["events"] == []


def test_a_restore_in_progress_then_done() -> None:
    restoring = filters.sampledb_status(found(initialized="False", restore_state="Running",
                                              restore_message="restoring b1", status={"phase": "Provisioning"}))
    assert restoring["phase"] == "Provisioning"
    assert conditions(restoring)["Progressing"] == ("True", "Restoring")
    assert restoring["conditions"][0]["message"] == "3 of 3 servers ready; primary db-0, restoring b1"
    assert restoring["requeue_after"] == "5s"
    done = filters.sampledb_status(found(restore_state="Succeeded", restore_message="restored from b1"))
    assert done["events"] == [{"reason": "Restored", "type": "Normal", "message": "restored from b1"}]
    failed = filters.sampledb_status(found(initialized="False", restore_failure="backup b1 not found"))
    assert failed["phase"] == "Failed" and failed["events"][0]["reason"] == "RestoreFailed"


def test_an_upgrade_starts_keeps_its_start_and_ends_with_its_duration() -> None:
    upgrading = {"upgrade_active": True, "upgrade_from": "15", "upgrade_to": "16", "upgrade_message": "backup first",
                 "running_version": "15"}
    start = filters.sampledb_status(found(**upgrading))
    assert start["phase"] == "Upgrading"
    assert start["status"]["upgrade"] == {"from": "15", "to": "16", "message": "backup first", "startedAt": NOW}
    assert [e["reason"] for e in start["events"]] == ["UpgradeStarted"]
    recorded = {"phase": "Upgrading", "upgrade": {"to": "16", "startedAt": "2026-11-26T02:58:00Z"}}
    going = filters.sampledb_status(found(**upgrading, status=recorded))
    assert going["status"]["upgrade"]["startedAt"] == "2026-11-26T02:58:00Z" and going["events"] == []
    done = filters.sampledb_status(found(upgrade_completed=True, upgrade_from="15", status=recorded))
    assert done["events"] == [{"reason": "Upgraded", "type": "Normal", "message": "upgraded from 15 to 16 in 120 s"}]


def test_a_failed_upgrade_degrades_and_is_told_once() -> None:
    upgrade = {"to": "16", "startedAt": "2026-11-26T02:58:00Z"}
    failed = filters.sampledb_status(found(upgrade_active=True, upgrade_to="16", upgrade_failure="pg_upgrade failed",
                                           status={"phase": "Upgrading", "upgrade": upgrade}))
    assert failed["phase"] == "Ready"  # the servers stay on the old version, serving
    assert conditions(failed)["Degraded"] == ("True", "UpgradeFailed")
    assert [e["reason"] for e in failed["events"]] == ["UpgradeFailed"]
    told = {"phase": "Ready", "conditions": [{"type": "Degraded", "reason": "UpgradeFailed"}], "upgrade": upgrade}
    again = filters.sampledb_status(found(upgrade_active=True, upgrade_to="16", upgrade_failure="pg_upgrade failed",
                                          status=told))
    assert again["events"] == []


def test_servers_being_added_to_a_new_database_are_provisioning() -> None:
    result = filters.sampledb_status(found(desired=5, status={"phase": "Provisioning"}))
    assert result["phase"] == "Provisioning"
    assert conditions(result)["Progressing"] == ("True", "Provisioning")
    assert result["requeue_after"] == "5s"
    scaled = filters.sampledb_status(found(desired=5))  # a Ready database scaled up stays Ready, rolling out
    assert scaled["phase"] == "Ready" and conditions(scaled)["Progressing"] == ("True", "RollingOut")


def test_a_failed_step_makes_the_database_degraded_never_ready() -> None:
    """A step of the run failed (a bad edit that provision cannot apply, say): the servers still serve, but status
    does not say Ready while runs fail; Degraded names the step and its message, and it is watched closely."""
    failed = [{"step": "provision", "task": "Apply", "message": "spec.volumeClaimTemplates: Forbidden",
               "summary": "provision: Apply: spec.volumeClaimTemplates: Forbidden"}]
    result = filters.sampledb_status(found(failed_steps=failed))
    assert result["phase"] == "Degraded"
    assert conditions(result)["Ready"] == ("False", "StepFailing")
    assert conditions(result)["Degraded"] == ("True", "ProvisionFailed")
    degraded = next(c for c in result["conditions"] if c["type"] == "Degraded")
    assert degraded["message"] == "provision: Apply: spec.volumeClaimTemplates: Forbidden"
    assert result["requeue_after"] == "3s"
    # a failover in progress says so first
    plan = {"target": "", "fencing": "db-0", "changed": False, "promote": "db-1", "reason": "failover",
            "message": "waiting for db-0"}
    assert filters.sampledb_status(found(failed_steps=failed, leader_plan=plan))["phase"] == "FailingOver"


def test_a_blocked_failover_is_degraded_with_the_reason() -> None:
    plan = {"target": "", "fencing": "db-0", "changed": False, "promote": "db-1", "reason": "failover",
            "message": "nobody is promoted", "blocked": "the WAL position of db-2 could not be read"}
    result = filters.sampledb_status(found(leader_plan=plan, leader_ready=["db-1"], ready="1"))
    assert result["phase"] == "FailingOver"
    assert conditions(result)["Degraded"] == ("True", "FailoverBlocked")


def test_why_a_server_does_not_run_is_in_the_degraded_message() -> None:
    """A container the kubelet cannot run, for a reason a user can act on (the Lease agent's image not on the node, a
    server that keeps crashing), is named in Degraded's message; a container on its way is not."""
    def pod(name: str, init: dict | None, main: dict) -> dict:
        return {"metadata": {"name": name}, "status": {
            "initContainerStatuses": [{"name": "lease-agent", "state": init}] if init else [],
            "containerStatuses": [{"name": "postgres", "state": main}]}}
    pulling = {"waiting": {"reason": "ImagePullBackOff", "message": 'Back-off pulling image "x:1"'}}
    pods = [pod("db-0", {"running": {}}, {"running": {}}),
            pod("db-1", pulling, {"waiting": {"reason": "PodInitializing"}}),
            pod("db-2", {"running": {}}, {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 5m0s"}}),
            pod("db-3", {"waiting": {"reason": "ContainerCreating"}}, {"waiting": {"reason": "PodInitializing"}})]
    out = filters.sampledb_status(found(ready="1", server_pods=pods))
    degraded = next(c for c in out["conditions"] if c["type"] == "Degraded")
    assert degraded["reason"] == "ServersNotReady"
    assert degraded["message"] == ('1 of 3 servers ready: db-1: lease-agent ImagePullBackOff (Back-off pulling image '
                                   '"x:1"); db-2: postgres CrashLoopBackOff (back-off 5m0s)')
    assert next(c for c in filters.sampledb_status(found(server_pods=pods[:1]))["conditions"]
                if c["type"] == "Degraded")["reason"] == "AllServersHealthy"


def test_a_server_that_keeps_ending_is_reported_with_what_it_said_as_it_ended() -> None:
    """A recovery that cannot reach its target ends its container with the reason as termination message: Degraded
    quotes it, not the back-off."""
    said = "recovery from s3://b/ns/old failed: Cannot find any candidate backup for recovery."
    pods = [{"metadata": {"name": "db-0"}, "status": {"containerStatuses": [
        {"name": "postgres", "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 40s"}},
         "lastState": {"terminated": {"exitCode": 1, "message": said + "\n"}}}]}}]
    degraded = next(c for c in filters.sampledb_status(found(ready="0", server_pods=pods))["conditions"]
                    if c["type"] == "Degraded")
    assert degraded["message"].endswith(f"db-0: postgres CrashLoopBackOff ({said})"), degraded
