"""Restore drills (spec.backup.verify): what the newest drill that ended said.

A drill is a Job of the database's <name>-verify CronJob running verify.sh: the newest completed base backup and the
WAL archived since, restored into a scratch volume and replayed by a server only the Job reaches. It passes when that
server promotes and every database in it answers; verify.sh then writes key=value pairs to its termination log, or
error=<base64> when it failed.
"""

from __future__ import annotations

import base64
from typing import Any

# What verify.sh writes, as the fields of status.lastVerifiedRecovery.
_REPORTED = {"backup_id": "backupId", "recovered_to": "recoveredTo", "timeline": "timeline",
             "databases": "databases", "seconds": "seconds"}


def _condition(job: dict, kind: str) -> dict:
    return next((c for c in (job.get("status") or {}).get("conditions") or []
                 if c.get("type") == kind and c.get("status") == "True"), {})


def _ended(job: dict) -> tuple[str, str]:
    """(Passed or Failed, when) for a Job that ended; ('', '') for one that runs."""
    status = job.get("status") or {}
    if _condition(job, "Complete") or status.get("succeeded"):
        return "Passed", status.get("completionTime") or _condition(job, "Complete").get("lastTransitionTime", "")
    if failed := _condition(job, "Failed"):
        return "Failed", failed.get("lastTransitionTime", "")
    return "", ""


def _decoded(value: str) -> str:
    try:
        return base64.b64decode(value.encode(), validate=True).decode(errors="replace").strip()
    except ValueError:
        return ""


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
    fields = next((dict(kv.split("=", 1) for kv in m.split() if "=" in kv) for m in said if m.strip()), {})
    report: dict[str, Any] = {"state": state, "job": name, "endedAt": at}
    if state == "Passed":
        report.update({key: fields[k] for k, key in _REPORTED.items() if fields.get(k)})
    else:
        failed = _condition(job, "Failed")
        why = ": ".join(x for x in (failed.get("reason"), failed.get("message")) if x)
        report["error"] = (_decoded(fields.get("error", "")) or
                           (f"the drill's pod left no message ({why or 'killed, or out of memory?'}): "
                            f"kubectl logs job/{name}, kubectl describe job/{name}"))
    return report


class FilterModule:
    def filters(self):
        return {"sampledb_verify_report": sampledb_verify_report}
