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


def sampledb_own_servers(pods, name, created=""):
    """The server pods of SampleDB ``name`` among pods its labels selected: named <name>-<ordinal> and controlled by
    its StatefulSet (or by nothing, while the StatefulSet is re-created around them), never another workload's pods
    that happen to share the instance label (a Helm release of the same name), nor, with ``created`` (the
    SampleDB's creationTimestamp), the pods of an earlier SampleDB of the name that are still going."""
    pattern = re.compile(rf"{re.escape(str(name))}-\d+")
    out = []
    for pod in pods or []:
        meta = pod.get("metadata") or {}
        if created and str(meta.get("creationTimestamp") or created) < str(created):
            continue
        owner = _controller(pod)
        if pattern.fullmatch(meta.get("name", "")) and (
                owner is None or (owner.get("kind") == "StatefulSet" and owner.get("name") == name)):
            out.append(pod)
    return out


def sampledb_foreign(objects, uid, selector):
    """'Kind name' of each object that is neither this SampleDB's (an ownerReference to its UID) nor one an earlier
    SampleDB of this name left (it carries the database's labels: retained volumes, credentials, backups): another
    application's object of the same name, which the operator must not take over."""
    out = []
    for obj in objects or []:
        meta = obj.get("metadata") or {}
        owned = any(r.get("uid") == uid for r in meta.get("ownerReferences") or [])
        labelled = all((meta.get("labels") or {}).get(k) == v for k, v in (selector or {}).items())
        if not owned and not labelled:
            out.append(f"{obj.get('kind', '')} {meta.get('name', '')}")
    return out


def sampledb_synchronous_standby_names(name, servers):
    """synchronous_standby_names for sync mode: a commit waits for any one of the database's servers by name (each
    streams as application_name <name>-<ordinal>), never for another WAL stream such as a clone's pg_basebackup,
    which is thrown away if the clone fails. '' with one server: nobody to wait for."""
    count = int(servers)
    if count <= 1:
        return ""
    return "ANY 1 (" + ",".join(f'"{name}-{i}"' for i in range(count)) + ")"


def sampledb_own_volumes(claims, name):
    """The data volumes of SampleDB ``name`` (the StatefulSet's claims data-<name>-<ordinal>) among claims its labels
    selected."""
    pattern = re.compile(rf"data-{re.escape(str(name))}-\d+")
    return [c for c in claims or [] if pattern.fullmatch((c.get("metadata") or {}).get("name", ""))]


def sampledb_volumes_hold_data(claims, created):
    """Whether these data volumes hold a database already: one carries its identity, or was there before the
    SampleDB was created (``created``, its creationTimestamp: volumes kept from an earlier SampleDB of that name). A
    volume being deleted (an earlier SampleDB's, deleted with it) holds nothing the database will have."""
    for claim in claims or []:
        meta = claim.get("metadata") or {}
        if meta.get("deletionTimestamp"):
            continue
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


def sampledb_job_state(job, owner_uid=""):
    """None (no such Job), Running, Succeeded or Failed (out of retries) for a Job object. With ``owner_uid``, a Job
    owned by another object (an earlier SampleDB of the name, not yet garbage-collected) is not this one's outcome:
    Running, until it is gone and this database's own is made."""
    if not job:
        return "None"
    owners = [r.get("uid") for r in (job.get("metadata") or {}).get("ownerReferences") or []]
    if owner_uid and owners and owner_uid not in owners:
        return "Running"
    status = job.get("status") or {}
    if int(status.get("succeeded") or 0) > 0:
        return "Succeeded"
    if any(c.get("type") == "Failed" and c.get("status") == "True" for c in status.get("conditions") or []):
        return "Failed"
    return "Running"


def sampledb_jobs_running(jobs) -> list[str]:
    """The names of the Jobs among ``jobs`` that are still running (sampledb_job_state's Running)."""
    return [j["metadata"]["name"] for j in jobs or [] if sampledb_job_state(j) == "Running"]


def _conf_value(value):
    """A postgresql.conf value, quoted: booleans as on/off; a quote doubled and a backslash escaped (the
    server reads backslash escapes inside quotes)."""
    if isinstance(value, bool):
        value = "on" if value else "off"
    return "'" + str(value).replace("\\", "\\\\").replace("'", "''") + "'"


def sampledb_restart_hash(configmap_data, restart_parameters):
    """A short hash of what a server only takes by restarting: its scripts, and the settings of postgresql.conf that
    PostgreSQL reads at start only (``restart_parameters``). Other settings, pg_hba.conf and the object store's
    settings are read again in place, so a change of them changes nothing here."""
    import hashlib

    data = dict(configmap_data or {})
    conf = data.pop("postgresql.conf", "")
    data.pop("pg_hba.conf", None)
    data.pop("objectstore.env", None)  # (read by archive.sh at each WAL file: a new store needs no restart)
    data.pop("recovery.env", None)  # (read once, by the recovery that makes the database)
    # (run by the physical backups' and the restore drills' Jobs, or once by the recovery that makes the database)
    for script in ("base-backup.sh", "verify.sh", "replay.sh", "choose-base-backup.py", "store.py"):
        data.pop(script, None)
    names = set(restart_parameters or [])
    kept = [line for line in conf.splitlines() if line.split("=", 1)[0].strip() in names]
    text = "\n".join(kept) + "\0" + "\0".join(f"{k}\0{v}" for k, v in sorted(data.items()))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def sampledb_settings(defaults, parameters=None, managed=None, names=()):
    """The values postgresql.conf gets for ``names`` (the operator's defaults, spec.parameters over them, the managed
    settings over both), as {name: value}."""
    settings = {**(defaults or {}), **(parameters or {}), **(managed or {})}
    return {n: str(settings[n]) for n in names if n in settings}


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


DEFAULT_CLASS = "storageclass.kubernetes.io/is-default-class"


def _request(claim: dict) -> str:
    return str((((claim.get("spec") or {}).get("resources") or {}).get("requests") or {}).get("storage") or "")


def _claim_template_size(sts: dict) -> str:
    templates = ((sts or {}).get("spec") or {}).get("volumeClaimTemplates") or []
    return _request(templates[0]) if templates else ""


def sampledb_volume_growth(claims, size, classes, field="spec.storage.size", sts=None):
    """What to do about a volume size: {grow: claims to grow in place, size: the size the StatefulSet's claim
    template gets, refused: why ``size`` cannot be had ('' when it can)}. A claim grows when its StorageClass allows
    volume expansion; when one cannot, none is grown and the template keeps the size it has (``sts``, the StatefulSet
    as it is), so the servers keep working."""
    want = sampledb_bytes(size)
    by_name = {(c.get("metadata") or {}).get("name"): c for c in classes or []}
    default = next((n for n, c in by_name.items()
                    if ((c.get("metadata") or {}).get("annotations") or {}).get(DEFAULT_CLASS) == "true"), "")
    grow, stuck = [], []
    for claim in claims or []:
        if not _request(claim) or sampledb_bytes(_request(claim)) >= want:
            continue
        name = claim["metadata"]["name"]
        cls = (claim.get("spec") or {}).get("storageClassName") or default
        if (by_name.get(cls) or {}).get("allowVolumeExpansion"):
            grow.append(name)
        else:
            stuck.append((name, cls, _request(claim)))
    if not stuck:
        return {"grow": grow, "size": str(size), "refused": ""}
    now = _claim_template_size(sts) or stuck[0][2]
    classes_named = sorted({c for _, c, _ in stuck})
    refused = (f"{field} {size}: the volumes of StorageClass {', '.join(classes_named) or '(none)'} cannot grow "
               f"(allowVolumeExpansion is not true), so {', '.join(n for n, _, _ in stuck)} stay "
               f"{', '.join(sorted({s for _, _, s in stuck}))}; set {field} back to {now}, or move the data to a "
               "class that can grow (a backup restored into a new SampleDB)")
    return {"grow": [], "size": now, "refused": refused}


def _epoch(text):
    try:
        return int(datetime.strptime(str(text), "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp())
    except ValueError:
        return 0


def sampledb_older_than(times, now, seconds):
    """The times (as '%Y-%m-%dT%H:%M:%SZ') at least ``seconds`` before ``now``."""
    return [t for t in times or [] if t and _epoch(now) - _epoch(t) >= float(seconds)]


def sampledb_backup_times(records, last_schedule_time=None):
    """The two times the missed-backup alert compares, as Unix seconds (0 for never): when the newest
    Completed backup of the records completed, and when the CronJob last started a scheduled one
    (its status.lastScheduleTime). A scheduled backup that has not completed leaves the second ahead."""
    completed = [_epoch((r.get("status") or {}).get("completedAt")) for r in records or []
                 if (r.get("status") or {}).get("phase") == "Completed"]
    return {"last_success": max(completed, default=0),
            "last_scheduled": _epoch(last_schedule_time) if last_schedule_time else 0}


def sampledb_backup_job(jobs, database, reason, backup_uid, backup_of_label, scheduled_label, uid_label):
    """The Job of a backup among the Jobs read by its name, {} when none is its own: a scheduled backup's must be a
    scheduled Job of its database's CronJob, any other's must carry the backup's UID."""
    for job in jobs or []:
        labels = (job.get("metadata") or {}).get("labels") or {}
        if labels.get(backup_of_label) != database:
            continue
        if (reason == "Scheduled" and labels.get(scheduled_label) == "true") or labels.get(uid_label) == backup_uid:
            return job
    return {}


def sampledb_backups_of(records, database, uid, created, uid_label):
    """The SampleDBBackups of this database (SampleDB ``database`` with ``uid``, created at ``created``): those that
    say so by UID, and unlabelled ones of its name made since it was created. A SampleDB created again with the same
    name is another database: it never counts, prunes or deletes the backups of the one before."""
    out = []
    for record in records or []:
        meta = record.get("metadata") or {}
        if (record.get("spec") or {}).get("database") != database:
            continue
        labelled = (meta.get("labels") or {}).get(uid_label)
        if labelled == uid or (not labelled and str(meta.get("creationTimestamp") or "") >= str(created or "")):
            out.append(record)
    return out


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
            "sampledb_jobs_running": sampledb_jobs_running,
                "sampledb_postgresql_conf": sampledb_postgresql_conf,
                "sampledb_restart_hash": sampledb_restart_hash,
                "sampledb_settings": sampledb_settings,
                "sampledb_backup_times": sampledb_backup_times,
                "sampledb_older_than": sampledb_older_than,
                "sampledb_applied": sampledb_applied,
                "sampledb_backup_job": sampledb_backup_job,
                "sampledb_backups_of": sampledb_backups_of,
                "sampledb_bytes": sampledb_bytes,
                "sampledb_own_servers": sampledb_own_servers,
                "sampledb_foreign": sampledb_foreign,
                "sampledb_own_volumes": sampledb_own_volumes,
                "sampledb_synchronous_standby_names": sampledb_synchronous_standby_names,
                "sampledb_volumes_hold_data": sampledb_volumes_hold_data,
                "sampledb_volumes_unmarked": sampledb_volumes_unmarked,
                "sampledb_wal_budget": sampledb_wal_budget,
                "sampledb_volume_growth": sampledb_volume_growth}
