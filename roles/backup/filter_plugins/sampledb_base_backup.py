"""Physical backups (SampleDBBackup spec.method physical): which method a backup takes, from which server, and what
its Job says of it.

A physical backup is barman-cloud-backup's copy of a server's data directory to the database's object store (the
archive's ``base`` beside its ``wals``), between pg_backup_start and pg_backup_stop on that server. Restored with the
WAL archived since, it brings the database back to any point after its end. A dump (pg_dumpall) is kept for
portability and major versions. A restore drill (spec.backup.verify: a Job of the database's <name>-verify CronJob
running verify.sh) restores the newest completed one and the WAL archived since into a scratch volume and replays it;
it passes when that server promotes and every database in it answers.

Both Jobs say what they did in their termination log: key=value pairs, an error as error=<base64>.
"""

from __future__ import annotations

import base64
from typing import Any

PHYSICAL = "physical"
DUMP = "dump"

# What base-backup.sh writes to its termination log, as status fields.
_REPORTED = {
    "id": "backupId",
    "name": "backupName",
    "begin_lsn": "beginLSN",
    "end_lsn": "endLSN",
    "begin_wal": "beginWal",
    "end_wal": "endWal",
    "begin_time": "beginTime",
    "end_time": "endTime",
    "timeline": "timeline",
    "server": "server",
    "size": "bytes",
    # (spec.backup.retentionPolicy: what the store kept, for the database's status and the records of backups gone)
    "oldest_kept": "oldestKept",
    "first_recoverability": "firstRecoverabilityPoint",
    # (for the database's status.recoverableArchive: where the Job put it)
    "archive": "archive",
}


def sampledb_backup_method(requested: Any, objectstore: Any, database: str = "") -> dict[str, str]:
    """The method a backup takes: ``requested`` (spec.method) when given, else physical when the database has an
    object store and dump when it has none. {method, error}: error names the field and the fix when a physical
    backup is asked of a database without an object store."""
    store = bool(objectstore)
    method = str(requested or "") or (PHYSICAL if store else DUMP)
    if method == PHYSICAL and not store:
        return {"method": method,
                "error": f"spec.method: physical needs an object store, and SampleDB {database} has none: set its "
                         "spec.backup.objectStore, or ask for method dump"}
    return {"method": method, "error": ""}


def _ready(pod: dict) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in ((pod.get("status") or {}).get("conditions") or []))


def sampledb_backup_source(pods: Any, primary: str, role_label: str = "sampledb.example.com/role",
                           from_replica: bool = True) -> str:
    """The server a physical backup is taken from: a Ready replica (the lowest ordinal; it spares the primary the
    copy), else the primary; '' when there is neither. ``from_replica`` false: the primary (a final backup, taken with
    the primary fenced, must end after its last write: a replica may not have replayed it yet)."""
    def ordinal(pod: dict) -> int:
        name = pod["metadata"]["name"]
        tail = name.rsplit("-", 1)[-1]
        return int(tail) if tail.isdigit() else -1
    replicas = [p for p in sorted(pods or [], key=ordinal)
                if p["metadata"]["name"] != primary and _ready(p)
                and ((p["metadata"].get("labels") or {}).get(role_label)) == "replica"
                and not p["metadata"].get("deletionTimestamp")]
    if replicas and from_replica:
        return replicas[0]["metadata"]["name"]
    return primary or ""


def _decoded(value: str) -> str:
    try:
        return base64.b64decode(value.encode(), validate=True).decode(errors="replace").strip()
    except ValueError:
        return ""


def _said(message: Any) -> dict[str, str]:
    """A termination log's key=value pairs."""
    return dict(kv.split("=", 1) for kv in str(message or "").split() if "=" in kv)


def sampledb_base_backup_report(messages: Any) -> dict[str, str]:
    """What base-backup.sh wrote to its termination log (key=value pairs), as the SampleDBBackup's status fields
    (``bytes``: the size in bytes), or {'error': why} from a pod whose backup failed; {} when no pod wrote either.
    A pod that succeeded wins over the ones that failed before it."""
    failure = {}
    for message in messages or []:
        fields = _said(message)
        if fields.get("id"):
            report = {_REPORTED[k]: v for k, v in fields.items() if k in _REPORTED and v}
            if fields.get("retention_error"):
                report["retentionError"] = _decoded(fields["retention_error"]) or "barman-cloud-backup-delete failed"
            return report
        if "error" in fields and not failure:
            failure = {"error": _decoded(fields["error"]) or "the backup failed without a message"}
    return failure


def sampledb_backups_pruned_by_store(records: Any, oldest_kept: str, location: str) -> list[dict]:
    """The completed physical SampleDBBackups in the same archive as ``location`` (a base backup's: <archive>/base/<id>;
    another path, or another major's, is another archive) whose base backup is older than the oldest that archive kept
    (barman's ids are times of one width, so they sort as text): the retention policy deleted them."""
    archive = str(location or "").rsplit("/", 1)[0] + "/"
    if not oldest_kept or not archive.endswith("/base/"):
        return []
    out = []
    for record in records or []:
        status = record.get("status") or {}
        if (status.get("method") == PHYSICAL and status.get("phase") == "Completed"
                and str(status.get("location") or "").startswith(archive)
                and status.get("backupId", oldest_kept) < oldest_kept):
            out.append(record)
    return out


# What verify.sh writes, as the fields of status.lastVerifiedRecovery.
_DRILL_REPORTED = {"backup_id": "backupId", "recovered_to": "recoveredTo", "timeline": "timeline",
                   "databases": "databases", "seconds": "seconds"}


def _job_condition(job: dict, kind: str) -> dict:
    return next((c for c in (job.get("status") or {}).get("conditions") or []
                 if c.get("type") == kind and c.get("status") == "True"), {})


def _ended(job: dict) -> tuple[str, str]:
    """(Passed or Failed, when) for a Job that ended; ('', '') for one that runs."""
    status = job.get("status") or {}
    if _job_condition(job, "Complete") or status.get("succeeded"):
        return "Passed", status.get("completionTime") or _job_condition(job, "Complete").get("lastTransitionTime", "")
    if failed := _job_condition(job, "Failed"):
        return "Failed", failed.get("lastTransitionTime", "")
    return "", ""


def _of(job: dict, cronjob: str) -> bool:
    """Made by that CronJob (not merely labelled like its Jobs)."""
    return any(ref.get("kind") == "CronJob" and ref.get("name") == cronjob
               for ref in (job.get("metadata") or {}).get("ownerReferences") or [])


def sampledb_verify_report(jobs: Any, pods: Any, cronjob: str) -> dict[str, Any]:
    """The newest drill Job of ``cronjob`` that ended, as {state: Passed|Failed, job, endedAt} with what its pod said
    (Passed: backupId, recoveredTo, timeline, databases, seconds; Failed: error, or why there is none); {} when none
    ended."""
    ended = [(at, state, job) for job in jobs or [] if _of(job, cronjob)
             for state, at in [_ended(job)] if state and at]
    if not ended:
        return {}
    at, state, job = max(ended, key=lambda e: e[0])
    name = job["metadata"]["name"]
    said = [((c.get("state") or {}).get("terminated") or {}).get("message") or ""
            for pod in pods or [] if name in [((pod.get("metadata") or {}).get("labels") or {}).get(label)
                                              for label in ("batch.kubernetes.io/job-name", "job-name")]
            for c in (pod.get("status") or {}).get("containerStatuses") or []]
    fields = next((_said(m) for m in said if m.strip()), {})
    report: dict[str, Any] = {"state": state, "job": name, "endedAt": at}
    if state == "Passed":
        report.update({key: fields[k] for k, key in _DRILL_REPORTED.items() if fields.get(k)})
    else:
        failed = _job_condition(job, "Failed")
        why = ": ".join(x for x in (failed.get("reason"), failed.get("message")) if x)
        report["error"] = (_decoded(fields.get("error", "")) or
                           (f"the drill's pod left no message ({why or 'killed, or out of memory?'}): "
                            f"kubectl logs job/{name}, kubectl describe job/{name}"))
    return report


class FilterModule:
    def filters(self):
        return {
            "sampledb_backup_method": sampledb_backup_method,
            "sampledb_backup_source": sampledb_backup_source,
            "sampledb_base_backup_report": sampledb_base_backup_report,
            "sampledb_backups_pruned_by_store": sampledb_backups_pruned_by_store,
            "sampledb_verify_report": sampledb_verify_report,
        }
