"""What a SampleDB's status says, from what the other roles of the run found (roles/status/tasks/main.yml
gathers it): the phase, the Ready, Progressing and Degraded conditions, the status fields, the Events a
user wants to hear about, and when to look again.

Phase, first that applies: Failed (the database cannot come up as asked: a failed bootstrap or restore),
Upgrading, Provisioning (not yet Ready once), SwitchingOver or FailingOver (the primary is not Ready, or is being or
was just replaced), Degraded (a step of the run failed: status never says Ready while runs fail), BackingUp (a backup
is running), Ready.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from ansible.module_utils.parsing.convert_bool import boolean

CHANGING = ("Provisioning", "Upgrading", "FailingOver", "SwitchingOver")
UNREADY_SINCE = "sampledb.example.com/primary-unready-since"
ARCHIVING = "ContinuousArchiving"
VERIFIED = "RecoveryVerified"
TIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"


def _int(value: Any) -> int:
    return int(value or 0)


def _bool(value: Any) -> bool:
    return boolean(value, strict=False) if value is not None else False


def _text(value: Any) -> str:
    return "" if value is None else str(value)


def _seconds_since(started: str, now: str) -> int:
    parse = lambda t: datetime.strptime(t, TIME_FORMAT).replace(tzinfo=UTC)  # noqa: E731
    return int((parse(now) - parse(started)).total_seconds())


def _phase(f: dict[str, Any], failure: str, primary_ok: bool, failover: bool) -> str:
    if failure:
        return "Failed"
    if f["upgrade_active"] and not f["upgrade_failure"]:
        return "Upgrading"
    if not f["initialized"] or (f["was"] == "Provisioning" and f["ready"] < f["desired"]):
        return "Provisioning"
    if failover and f["change_reason"] in ("switchover", "rollout"):
        return "SwitchingOver"
    if failover or not (primary_ok or f["hold"]):
        return "FailingOver"
    if f["failed_steps"] or f["refused"]:
        return "Degraded"
    if f["backup_in_progress"]:
        return "BackingUp"
    return "Ready"


# what keeps a container from running that a user can act on (a container being made, or waiting for the one
# before it, is on its way)
ON_ITS_WAY = ("ContainerCreating", "PodInitializing")


def sampledb_server_problems(pods: Any) -> list[str]:
    """Why server containers do not run, as the kubelet says it: "<pod>: <container> <reason> (<message>)" for each
    container (the Lease agent sidecar's included) waiting for a reason a user can act on, such as an image that
    cannot be pulled or a container that keeps crashing (with the termination message it last left, if any)."""
    out = []
    for pod in pods or []:
        status = (pod or {}).get("status") or {}
        name = ((pod or {}).get("metadata") or {}).get("name", "")
        for c in (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or []):
            waiting = (c.get("state") or {}).get("waiting") or {}
            reason = waiting.get("reason") or ""
            if reason and reason not in ON_ITS_WAY:
                # (a container that keeps ending: why it ended last, when it said so, rather than the back-off)
                said = ((c.get("lastState") or {}).get("terminated") or {}).get("message") or ""
                message = " ".join(str(said or waiting.get("message") or "").split())[:600]
                out.append(f"{name}: {c.get('name', '')} {reason}" + (f" ({message})" if message else ""))
    return out


def _conditions(f: dict[str, Any], phase: str, failure: str, primary: str, primary_ok: bool) -> list[dict[str, str]]:
    ready, desired, initialized = f["ready"], f["desired"], f["initialized"]
    servers = f"{ready} of {desired} servers ready" + (f": {'; '.join(f['problems'])}" if f["problems"] else "")
    failing = "; ".join(s.get("summary", "") for s in f["failed_steps"])
    serving = initialized and primary_ok and not failing
    if serving:
        ready_reason = "Serving"
    elif failing and initialized and primary_ok:
        ready_reason = "StepFailing"
    elif failure:
        ready_reason = "Failed"
    else:
        ready_reason = "PrimaryNotReady" if initialized else "Initializing"
    pending = "" if initialized else ", " + (f["restore_message"] or "bootstrap pending")
    restoring = f["restore_state"] not in ("", "Succeeded")

    if phase in CHANGING:
        progress_reason = "Restoring" if restoring and phase == "Provisioning" else phase
    else:
        progress_reason = "RollingOut" if ready < desired else "Stable"
    if phase == "Upgrading":
        progress_message = f["upgrade_message"]
    elif phase in ("FailingOver", "SwitchingOver") and f["leader_message"]:
        progress_message = f["leader_message"]
    elif restoring:
        progress_message = f["restore_message"]
    elif ready < desired:
        progress_message = servers
    else:
        progress_message = f"running {f['running_version']} as specified"

    upgrade_failure = f["upgrade_failure"]
    degraded_servers = initialized and ready < desired
    first_failed = f["failed_steps"][0] if f["failed_steps"] else {}
    if first_failed:
        degraded_reason, degraded_message = f"{first_failed.get('step', '').capitalize()}Failed", failing
    elif f["blocked"]:
        degraded_reason, degraded_message = "FailoverBlocked", f["blocked"]
    elif f["refused"]:
        degraded_reason, degraded_message = "StorageNotGrown", "; ".join(f["refused"])
    elif upgrade_failure:
        degraded_reason, degraded_message = "UpgradeFailed", upgrade_failure
    elif degraded_servers:
        degraded_reason, degraded_message = "ServersNotReady", servers
    else:
        degraded_reason, degraded_message = "AllServersHealthy", servers
    return [
        {"type": "Ready", "status": str(serving), "reason": ready_reason,
         "message": failure or (f"a step failed: {failing}" if failing else "")
         or f"{servers}; primary {primary or 'none'}{pending}"},
        {"type": "Progressing", "status": str(phase in CHANGING or ready < desired), "reason": progress_reason,
         "message": progress_message},
        {"type": "Degraded", "status": str(degraded_reason != "AllServersHealthy"), "reason": degraded_reason,
         "message": degraded_message},
        *_archive_conditions(f),
        *_verify_conditions(f),
    ]


def _said(f: dict[str, Any], kind: str) -> tuple[str, str, str] | None:
    """What the condition ``kind`` said last, while its feature was on: it stands when a step failed before the run
    read it again."""
    was = next((c for c in f["status"].get("conditions") or []
                if c.get("type") == kind and c.get("reason") != "NotConfigured"), {})
    return (_text(was.get("status")), _text(was.get("reason")), _text(was.get("message"))) if was else None


def _archive_state(f: dict[str, Any]) -> tuple[str, str, str]:
    """ContinuousArchiving's status, reason and message while spec.backup.objectStore is set ("" when it is not):
    what is missing of its Secret first, else archive.sh's report on the primary (sampledb_archive_report)."""
    archive = f["archive"]
    if not archive:
        return "", "", ""
    if f["archive_problem"]:
        return "False", "CredentialsMissing", f["archive_problem"]
    if archive.get("unread") and (was := _said(f, ARCHIVING)):
        return was
    healthy = archive.get("healthy")
    return ("Unknown" if healthy is None else str(bool(healthy)), _text(archive.get("reason")),
            _text(archive.get("message")))


def _last_recoverability_point(first: Any, archive: dict[str, Any], now: str) -> str:
    """status.lastRecoverabilityPoint: how far the archive reaches, once a base backup ends before it
    (firstRecoverabilityPoint): when the newest WAL segment reached it, or, while segments wait (a backlog goes up
    oldest first), when the oldest of them was written, whichever is earlier; '' while there is none. A recovery with no
    target replays about that far; a targetTime must be earlier."""
    try:
        until = datetime.fromisoformat(str(archive.get("lastArchivedAt")))
        if archive.get("waitingSegments") and now:
            until = min(until, datetime.fromisoformat(now) - timedelta(seconds=_int(archive.get("lagSeconds"))))
        if first and until >= datetime.fromisoformat(str(first)):
            return until.strftime(TIME_FORMAT)
    except (TypeError, ValueError):
        pass
    return ""


def _optional_condition(f: dict[str, Any], kind: str, state: tuple[str, str, str],
                        unset: str) -> list[dict[str, str]]:
    """A condition of a feature the spec may switch on (``state``: its status, reason and message, status "" while it
    is off): none while it was never on; once switched off, False with reason NotConfigured and ``unset``."""
    status, reason, message = state
    if not status:
        had = any(c.get("type") == kind for c in f["status"].get("conditions") or [])
        return [{"type": kind, "status": "False", "reason": "NotConfigured", "message": unset}] if had else []
    return [{"type": kind, "status": status, "reason": reason, "message": message}]


def _archive_conditions(f: dict[str, Any]) -> list[dict[str, str]]:
    return _optional_condition(f, ARCHIVING, _archive_state(f), "spec.backup.objectStore is not set: WAL is not archived")


def _verify_state(f: dict[str, Any]) -> tuple[str, str, str]:
    """RecoveryVerified's status, reason and message while spec.backup.verify is set ("" when it is not), from the
    newest restore drill that ended (sampledb_verify_report)."""
    drill = f["verify"]
    if not drill.get("configured"):
        return "", "", ""
    if drill.get("unread") and (was := _said(f, VERIFIED)):
        return was
    job, at = _text(drill.get("job")), _text(drill.get("endedAt"))
    if drill.get("state") == "Passed":
        to = (f"up to a transaction of {_text(drill['recoveredTo'])}" if drill.get("recoveredTo")
              else "(no transaction after the base backup)")
        return "True", "DrillPassed", (
            f"restore drill {job} passed at {at}: base backup {_text(drill.get('backupId'))} and the WAL archived "
            f"after it recovered {to} in {_text(drill.get('seconds'))} s, and {_text(drill.get('databases'))} "
            f"databases answered")
    if drill.get("state") == "Failed":
        return "False", "DrillFailed", f"restore drill {job} failed at {at}: {_text(drill.get('error'))}"
    return "Unknown", "NoDrillYet", "no restore drill has ended yet (spec.backup.verify.schedule)"


def _verify_conditions(f: dict[str, Any]) -> list[dict[str, str]]:
    return _optional_condition(f, VERIFIED, _verify_state(f), "spec.backup.verify is not set: no restore drills")


def _last_verified_recovery(drill: dict[str, Any]) -> dict[str, Any] | None:
    """status.lastVerifiedRecovery from a drill that passed; None otherwise (what was recorded stands)."""
    if not drill.get("configured") or drill.get("state") != "Passed":
        return None
    return {"time": drill.get("endedAt"), "job": drill.get("job"),
            **{k: drill[k] for k in ("backupId", "recoveredTo", "timeline", "databases", "seconds") if drill.get(k)}}


def _events(f: dict[str, Any], failure: str) -> list[dict[str, str]]:
    recorded_upgrade = f["status"].get("upgrade") or {}
    conditions = f["status"].get("conditions") or []
    degraded_by = next((c.get("reason", "") for c in conditions if c.get("type") == "Degraded"), "")
    events = []
    if f["upgrade_active"] and recorded_upgrade.get("to", "") != f["upgrade_to"]:
        events.append(("UpgradeStarted", "Normal", f"upgrading from {f['upgrade_from']} to {f['upgrade_to']}, backup first"))
    if f["upgrade_completed"]:
        took = (f" in {_seconds_since(recorded_upgrade['startedAt'], f['now'])} s"
                if recorded_upgrade.get("startedAt") else "")
        events.append(("Upgraded", "Normal", f"upgraded from {f['upgrade_from']} to {f['upgrade_to']}{took}"))
    if f["upgrade_failure"] and degraded_by != "UpgradeFailed":
        events.append(("UpgradeFailed", "Warning", f["upgrade_failure"]))
    if f["restore_state"] == "Succeeded":
        events.append(("Restored", "Normal", f["restore_message"]))
    was = next((c for c in conditions if c.get("type") == ARCHIVING), {})
    status, reason, message = _archive_state(f)
    if status == "False" and was.get("reason") != reason:
        events.append(("ArchivingFailed", "Warning", message))
    elif status == "True" and was.get("status") == "False":
        events.append(("ArchivingResumed", "Normal", message))
    was = next((c for c in conditions if c.get("type") == VERIFIED), {})
    status, reason, message = _verify_state(f)
    if status == "False" and was.get("message") != message:  # (each failed drill once: its Job is in the message)
        events.append(("RecoveryVerificationFailed", "Warning", message))
    elif status == "True" and was.get("status") == "False":
        events.append(("RecoveryVerified", "Normal", message))
    if failure and f["was"] != "Failed":
        events.append(("RestoreFailed" if f["restore_failure"] else "BootstrapFailed", "Warning", failure))
    return [{"reason": reason, "type": kind, "message": message} for reason, kind, message in events]


def sampledb_status(found: dict[str, Any]) -> dict[str, Any]:
    """``found``: what roles/status/tasks/main.yml gathers (see there). Returns ``phase``, ``status`` (the
    fields the status role writes), ``conditions``, ``events`` (reason, type, message) and ``requeue_after``
    (a duration, or "" for the reconcile period)."""
    status = found.get("status") or {}
    plan = found.get("leader_plan") or {}
    f = {
        "status": status,
        "desired": _int(found.get("desired")),
        "ready": _int(found.get("ready")),
        "initialized": _bool(found.get("initialized")),
        "was": status.get("phase") or "Provisioning",
        "hold": _bool(found.get("leader_hold")),
        "backup_in_progress": _bool(found.get("backup_in_progress")),
        "change_reason": _text(plan.get("reason")),
        "leader_message": _text(plan.get("message")),
        "blocked": _text(plan.get("blocked")),
        "failed_steps": [s for s in found.get("failed_steps") or [] if isinstance(s, dict)],
        "refused": [str(r) for r in found.get("refused") or [] if r],
        "problems": sampledb_server_problems(found.get("server_pods")),
        "running_version": _text(found.get("running_version")),
        "now": _text(found.get("now")),
        "archive": found.get("archive") if isinstance(found.get("archive"), dict) else {},
        "archive_problem": _text(found.get("archive_problem")),
        "verify": found.get("verify") if isinstance(found.get("verify"), dict) else {},
        **{k: _bool(found.get(k)) for k in ("upgrade_active", "upgrade_completed")},
        **{k: _text(found.get(k)) for k in ("upgrade_from", "upgrade_to", "upgrade_message", "upgrade_failure",
                                            "restore_state", "restore_message", "restore_failure")},
    }
    primary = _text(plan.get("target"))
    primary_ok = bool(primary) and primary in (found.get("leader_ready") or [])
    fencing = _text(plan.get("fencing"))
    failover = bool(fencing) or _bool(plan.get("changed"))
    failure = f["restore_failure"]
    if not failure and found.get("bootstrap_state") == "Failed" and not f["initialized"]:
        job = f"{found['name']}-init"
        failure = f"the bootstrap Job {job} failed; see kubectl logs job/{job}"
    phase = _phase(f, failure, primary_ok, failover)

    upgrade = None
    if f["upgrade_active"]:
        recorded = status.get("upgrade") or {}
        upgrade = {"from": f["upgrade_from"], "to": f["upgrade_to"], "message": f["upgrade_message"],
                   "startedAt": recorded["startedAt"] if recorded.get("to") == f["upgrade_to"] and
                   recorded.get("startedAt") else f["now"]}
    report = {
        "phase": phase,
        "version": f["running_version"],
        "readyReplicas": f["ready"],
        "readyReplicasText": f"{f['ready']}/{f['desired']}",
        "initialized": f["initialized"],
        "currentPrimary": primary or None,
        "targetPrimary": _text(plan.get("promote")) or None,
        "primaryLease": _text(found.get("lease_name")) or None,
        "primaryUnreadySince": None if failover else _text((plan.get("annotations") or {}).get(UNREADY_SINCE)) or None,
        "upgrade": upgrade,
    }
    for field, key in (("storageSize", "storage_size"), ("backupStorageSize", "backup_storage_size")):
        if _text(found.get(key)):
            report[field] = _text(found.get(key))
    archive = {k: v for k, v in f["archive"].items()
               if k not in ("healthy", "reason", "message", "unread", "archivesTo")}
    if f["archive"] and not archive:  # not read in this run: what was last read stands
        archive = dict(status.get("archive") or {})
    report["archive"] = archive or None
    if verified := _last_verified_recovery(f["verify"]):
        report["lastVerifiedRecovery"] = verified
    if until := _last_recoverability_point(status.get("firstRecoverabilityPoint"), archive, f["now"]):
        report["lastRecoverabilityPoint"] = until
    elif not f["archive"] and status.get("lastRecoverabilityPoint"):  # (the object store removed)
        report["lastRecoverabilityPoint"] = None
    recorded = _text(status.get("recoverableArchive"))
    destination = _text(archive.get("destination"))
    if recorded and destination and destination != recorded:
        # (the range is that of the archive the last base backup went to, which the primary no longer archives to
        # after a major upgrade or a new bucket or path: it recovers from firstRecoverabilityPoint to somewhere
        # before that change, not to the newest WAL; the new archive's range begins with its first base backup)
        report["lastRecoverabilityPoint"] = None
    elif not recorded and status.get("firstRecoverabilityPoint") and destination and not f["upgrade_active"]:
        # (a range recorded before recoverableArchive was: the archive the primary reports is the one it is about)
        report["recoverableArchive"] = destination
    identity = found.get("identity") or {}
    if isinstance(identity, dict) and (identity.get("systemIdentifier") or identity.get("error")) and \
            identity.get("checkedAt"):
        report["identity"] = identity

    # sooner than the reconcile period while something is in progress or unhealthy
    requeue = found.get("requeue") or {}
    if fencing:
        requeue_after = requeue.get("fence", "")
    elif phase != "Ready" or f["ready"] < f["desired"]:
        watching = phase in ("FailingOver", "SwitchingOver", "Ready", "BackingUp", "Degraded")
        requeue_after = requeue.get("health" if watching else "progress", "")
    else:
        requeue_after = ""
    return {"phase": phase, "status": report, "conditions": _conditions(f, phase, failure, primary, primary_ok),
            "events": _events(f, failure), "requeue_after": _text(requeue_after)}


class FilterModule:
    def filters(self):
        return {"sampledb_status": sampledb_status}
