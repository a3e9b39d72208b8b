"""Jinja filters for the SampleDB roles (the rules that are clearer in Python than in a template)."""

from __future__ import annotations

import re
from datetime import UTC, datetime


def _ordinal(name):
    """The StatefulSet ordinal of a server pod's name (inventory-2 -> 2); -1 when it has none."""
    match = re.search(r"-(\d+)$", str(name))
    return int(match.group(1)) if match else -1


IDENTITY_ANNOTATION = "sampledb.example.com/system-identifier"


def _controller(obj):
    return next((r for r in (obj.get("metadata") or {}).get("ownerReferences") or [] if r.get("controller")), None)


def sampledb_own_servers(pods, name):
    """The server pods of SampleDB ``name`` among pods its labels selected: named <name>-<ordinal> and controlled by
    its StatefulSet (or by nothing, while the StatefulSet is re-created around them), never another workload's pods
    that happen to share the instance label (a Helm release of the same name)."""
    pattern = re.compile(rf"{re.escape(str(name))}-\d+")
    out = []
    for pod in pods or []:
        meta = pod.get("metadata") or {}
        owner = _controller(pod)
        if pattern.fullmatch(meta.get("name", "")) and (
                owner is None or (owner.get("kind") == "StatefulSet" and owner.get("name") == name)):
            out.append(pod)
    return out


def sampledb_own_volumes(claims, name):
    """The data volumes of SampleDB ``name`` (the StatefulSet's claims data-<name>-<ordinal>) among claims its labels
    selected."""
    pattern = re.compile(rf"data-{re.escape(str(name))}-\d+")
    return [c for c in claims or [] if pattern.fullmatch((c.get("metadata") or {}).get("name", ""))]


def sampledb_volumes_hold_data(claims, created):
    """Whether these data volumes hold a database already: one carries its identity, or was there before the
    SampleDB was created (``created``, its creationTimestamp: volumes kept from an earlier SampleDB of that name)."""
    for claim in claims or []:
        meta = claim.get("metadata") or {}
        if (meta.get("annotations") or {}).get(IDENTITY_ANNOTATION):
            return True
        if created and meta.get("creationTimestamp") and meta["creationTimestamp"] < str(created):
            return True
    return False


def sampledb_volumes_unmarked(claims, identity):
    """The names of the data volumes that do not carry ``identity`` yet ([] when it is not known)."""
    if not identity:
        return []
    return [c["metadata"]["name"] for c in claims or []
            if ((c["metadata"].get("annotations") or {}).get(IDENTITY_ANNOTATION)) != identity]


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


_UNITS = {"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40, "Pi": 1 << 50,
          "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "": 1}


def sampledb_bytes(quantity):
    """A Kubernetes quantity of bytes ('2Gi', '1.5G', '500M', '1024') as an int."""
    match = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*(Ki|Mi|Gi|Ti|Pi|k|M|G|T|P|)\s*", str(quantity))
    if not match:
        raise ValueError(f"not a quantity of bytes: {quantity!r}")
    return int(float(match.group(1)) * _UNITS[match.group(2)])


def sampledb_wal_budget(storage_size, fraction=0.25):
    """A postgresql.conf size (in MB) that is ``fraction`` of the data volume: how much WAL the primary may keep
    for a replica that is behind (max_slot_wal_keep_size), so that a replica gone for good never fills the disk."""
    return f"{max(int(sampledb_bytes(storage_size) * float(fraction)) >> 20, 64)}MB"


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
                "sampledb_applied": sampledb_applied,
                "sampledb_bytes": sampledb_bytes,
                "sampledb_own_servers": sampledb_own_servers,
                "sampledb_own_volumes": sampledb_own_volumes,
                "sampledb_volumes_hold_data": sampledb_volumes_hold_data,
                "sampledb_volumes_unmarked": sampledb_volumes_unmarked,
                "sampledb_wal_budget": sampledb_wal_budget}
