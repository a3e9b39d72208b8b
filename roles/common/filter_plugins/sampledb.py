"""Jinja filters for the SampleDB roles (the rules that are clearer in Python than in a template)."""

from __future__ import annotations

import re
from datetime import UTC, datetime


def _ordinal(name):
    """The StatefulSet ordinal of a server pod's name (inventory-2 -> 2); -1 when it has none."""
    match = re.search(r"-(\d+)$", str(name))
    return int(match.group(1)) if match else -1


def sampledb_rollout_front(ready_pods, image, replicas):
    """How far a rolling update has come, as the lowest ordinal k such that every server from k up to
    replicas-1 is among `ready_pods` and runs `image` (replicas when the highest does not). A StatefulSet
    rolls from the highest ordinal down, so lowering the partition to k-1 updates exactly the next server."""
    done = {_ordinal(p["metadata"]["name"]) for p in ready_pods or []
            if any(c.get("image") == image for c in (p.get("spec") or {}).get("containers") or [])}
    front = int(replicas)
    while front > 0 and front - 1 in done:
        front -= 1
    return front


def sampledb_job_state(job):
    """None (no such Job), Running, Succeeded or Failed (out of retries) for a Job object."""
    if not job:
        return "None"
    status = job.get("status") or {}
    if int(status.get("succeeded") or 0) > 0:
        return "Succeeded"
    if any(c.get("type") == "Failed" and c.get("status") == "True" for c in status.get("conditions") or []):
        return "Failed"
    return "Running"


def _conf_value(value):
    """A postgresql.conf value, quoted: booleans as on/off; a quote doubled and a backslash escaped (the
    server reads backslash escapes inside quotes)."""
    if isinstance(value, bool):
        value = "on" if value else "off"
    return "'" + str(value).replace("\\", "\\\\").replace("'", "''") + "'"


def sampledb_postgresql_conf(defaults, parameters=None, managed=None):
    """postgresql.conf: the operator's defaults, spec.parameters over them, and the settings the servers depend
    on (listen address, port, socket directory, hot standby) over both, one `name = 'value'` line each, sorted."""
    settings = {**(defaults or {}), **(parameters or {}), **(managed or {})}
    return "".join(f"{name} = {_conf_value(value)}\n" for name, value in sorted(settings.items()))


def _epoch(text):
    try:
        return int(datetime.strptime(str(text), "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp())
    except ValueError:
        return 0


def sampledb_backup_times(records, last_schedule_time=None):
    """The two times the missed-backup alert compares, as Unix seconds (0 for never): when the newest
    Completed backup of the records completed, and when the CronJob last started a scheduled one
    (its status.lastScheduleTime). A scheduled backup that has not completed leaves the second ahead."""
    completed = [_epoch((r.get("status") or {}).get("completedAt")) for r in records or []
                 if (r.get("status") or {}).get("phase") == "Completed"]
    return {"last_success": max(completed, default=0),
            "last_scheduled": _epoch(last_schedule_time) if last_schedule_time else 0}


def sampledb_applied(registered, kind):
    """The object of ``kind`` as a kubernetes.core.k8s task returned it (its registered result, one object
    or a list applied together); {} when it applied none."""
    result = (registered or {}).get("result") or {}
    objects = [r.get("result") or {} for r in result.get("results") or []] if "results" in result else [result]
    return next((o for o in objects if o.get("kind") == kind), {})


class FilterModule:
    def filters(self):
        return {"sampledb_rollout_front": sampledb_rollout_front,
                "sampledb_job_state": sampledb_job_state,
                "sampledb_postgresql_conf": sampledb_postgresql_conf,
                "sampledb_backup_times": sampledb_backup_times,
                "sampledb_applied": sampledb_applied}
