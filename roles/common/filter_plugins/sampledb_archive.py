"""Continuous archiving (spec.backup.objectStore): where a database's WAL goes, and what its primary says of it.

barman-cloud names an archive by a URL and a server name, and lays it out as <url>/<server>/{wals,base}; a path
``team/orders`` in bucket ``b`` is URL ``s3://b/team/orders``, and PostgreSQL 15's archive there the server ``pg15``,
so its WAL lands under ``s3://b/team/orders/pg15/wals``: a major upgrade (a new database, whose WAL names begin again)
archives beside the old major's, never over it.
"""

from __future__ import annotations

import base64
import shlex
from datetime import UTC, datetime
from typing import Any

KEYS_DIR = "/etc/sampledb-s3/archive"
RESTORE_KEYS_DIR = "/etc/sampledb-s3/restore"
# spec.restoreFrom's targets, as the environment entrypoint.sh's recovery reads
TARGETS = {"targetTime": "SAMPLEDB_RECOVERY_TARGET_TIME", "targetLSN": "SAMPLEDB_RECOVERY_TARGET_LSN",
           "targetXID": "SAMPLEDB_RECOVERY_TARGET_XID", "targetName": "SAMPLEDB_RECOVERY_TARGET_NAME",
           "backupID": "SAMPLEDB_RECOVERY_BACKUP_ID"}
# ContinuousArchiving's reason when archive.sh's error names a field of spec.backup.objectStore (store.py probe)
FIELD_REASONS = {"credentials": "CredentialsRefused", "bucket": "BucketMissing", "endpointURL": "StoreUnreachable",
                 "region": "WrongRegion"}
ACCESS_KEY_FILE = "ACCESS_KEY_ID"
SECRET_KEY_FILE = "ACCESS_SECRET_KEY"


def sampledb_objectstore(spec: Any, namespace: str, name: str, major: Any = "", standby_hold_mb: Any = 1024,
                         call_seconds: Any = 30, keys_dir: str = KEYS_DIR, retention_policy: Any = "",
                         field: str = "spec.backup.objectStore") -> dict[str, Any]:
    """spec.backup.objectStore as the servers use it ({} when unset): ``url`` (barman-cloud's: each major version's
    archive is the server ``pg<major>`` below it, which archive.sh names from its image's PG_MAJOR), ``location``
    (where this major's archive is, for people), the Secret and its two keys, and ``env``: objectstore.env, the
    settings archive.sh reads (never the keys: those are files from the Secret)."""
    if not isinstance(spec, dict) or not spec.get("bucket"):
        return {}
    path = str(spec.get("path") or f"{namespace}/{name}").strip("/")
    url = f"s3://{spec['bucket']}/{path}"
    creds = spec.get("credentials") or {}
    compression = str(spec.get("compression") or "gzip")
    settings = {
        "SAMPLEDB_S3_ENDPOINT": str(spec.get("endpointURL") or "").rstrip("/"),
        "SAMPLEDB_S3_URL": url,
        "SAMPLEDB_S3_REGION": str(spec.get("region") or "us-east-1"),
        "SAMPLEDB_S3_COMPRESSION": "" if compression == "none" else compression,
        "SAMPLEDB_S3_KEYS": keys_dir,
        "SAMPLEDB_S3_CALL_SECONDS": str(int(call_seconds)),
        "SAMPLEDB_S3_FIELD": field,  # (what a message about these settings names)
        "SAMPLEDB_STANDBY_HOLD_MB": str(int(standby_hold_mb)),
    }
    if _recovery_window(retention_policy):
        settings["SAMPLEDB_RETENTION_POLICY"] = _recovery_window(retention_policy)
    major = str(major).split(".")[0]
    return {
        "url": url,
        "location": f"{url}/pg{major}" if major else url,
        "secret": str(creds.get("secretName") or ""),
        "access_key_key": str(creds.get("accessKeyIdKey") or "ACCESS_KEY_ID"),
        "secret_key_key": str(creds.get("secretAccessKeyKey") or "ACCESS_SECRET_KEY"),
        "endpoint": settings["SAMPLEDB_S3_ENDPOINT"],
        "keys_dir": keys_dir,
        "env": "".join(f"{k}={shlex.quote(v)}\n" for k, v in settings.items()),
    }


def _recovery_window(policy: Any) -> str:
    """spec.backup.retentionPolicy (7d, 4w, 3m) as barman's retention policy; '' when unset."""
    text = str(policy or "")
    units = {"d": "DAYS", "w": "WEEKS", "m": "MONTHS"}
    if len(text) < 2 or text[-1] not in units or not text[:-1].isdigit():
        return ""
    return f"RECOVERY WINDOW OF {int(text[:-1])} {units[text[-1]]}"


def sampledb_recovery_source(restore_from: Any, namespace: str, major: Any = "", own: Any = None,
                             call_seconds: Any = 30) -> dict[str, Any]:
    """spec.restoreFrom.objectStore as the bootstrap server's recovery reads it ({} when unset): sampledb_objectstore's
    fields for the source's archive (its keys mounted apart from this database's own), ``env`` with the target and
    base backup asked for, and ``error`` naming the field when the source is the archive this database writes to
    (``own``: its sampledb_objectstore): a new timeline's WAL would land among the source's."""
    restore_from = restore_from if isinstance(restore_from, dict) else {}
    spec = restore_from.get("objectStore")
    if not isinstance(spec, dict) or not spec.get("bucket"):
        return {}
    source = sampledb_objectstore(spec, namespace, str(spec.get("sourceName") or ""), major,
                                  call_seconds=call_seconds, keys_dir=RESTORE_KEYS_DIR, field="spec.restoreFrom.objectStore")
    extra = {var: str(restore_from[key]) for key, var in TARGETS.items() if restore_from.get(key) not in (None, "")}
    if "SAMPLEDB_RECOVERY_TARGET_TIME" in extra:
        # (PostgreSQL refuses a zone abbreviation in recovery_target_time, Z included: an offset it takes, as barman)
        when = extra["SAMPLEDB_RECOVERY_TARGET_TIME"]
        extra["SAMPLEDB_RECOVERY_TARGET_TIME"] = when[:10] + " " + when[11:].replace("Z", "+00:00")
    source["env"] += "".join(f"{k}={shlex.quote(v)}\n" for k, v in extra.items())
    asked = [f"{key} {restore_from[key]}" for key in TARGETS if key != "backupID" and key in restore_from]
    source["target"] = (asked[0] if asked else "the end of its archived WAL") + (
        f" from base backup {restore_from['backupID']}" if restore_from.get("backupID") else "")
    own = own if isinstance(own, dict) else {}
    if own.get("url") and (own["url"], own.get("endpoint", "")) == (source["url"], source["endpoint"]):
        source["error"] = (f"spec.restoreFrom.objectStore is {source['url']}, the archive this database writes to "
                           "(spec.backup.objectStore): restore from another database's path, or give this one "
                           "another spec.backup.objectStore.path")
    return source


def _epoch_iso(value: str) -> str:
    try:
        return datetime.fromtimestamp(int(value), tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    except (TypeError, ValueError, OverflowError):
        return ""


def _decoded(value: str) -> str:
    try:
        return base64.b64decode(value.encode(), validate=True).decode(errors="replace").strip()
    except (ValueError, UnicodeError):
        return ""


def sampledb_archive_report(text: Any, location: str = "", server: str = "") -> dict[str, Any]:
    """What archive.sh --report printed on the primary (key=value pairs; the error base64) as status.archive, with
    ``healthy`` (a bool) and ``reason``/``message`` for the ContinuousArchiving condition. ``text`` None or '' (the
    primary could not be asked) is reported as not read."""
    fields = dict(kv.split("=", 1) for kv in str(text or "").split() if "=" in kv)
    location = fields.get("destination") or location
    if "now" not in fields:  # (what was last read stands: the status role keeps it)
        why = (f"the primary {server} could not be asked" if server else "there is no primary to ask")
        return {"healthy": None, "reason": "NotRead", "message": why}
    now = int(fields.get("now") or 0)
    waiting = int(fields.get("ready") or 0)
    oldest = int(fields.get("oldest_ready") or 0)
    lag = max(now - oldest, 0) if waiting and oldest else 0
    report: dict[str, Any] = {
        "destination": location,
        "lastArchivedWal": fields.get("last_wal") or None,
        "lastArchivedAt": _epoch_iso(fields.get("last_ok", "")) or None,
        "waitingSegments": waiting,
        "lagSeconds": lag,
        # (None: a merge patch removes what an earlier failure or gap left)
        "lastError": None,
        "lastErrorAt": None,
        "gapFrom": fields.get("gap") or None,
    }
    # (not for status: the destination the primary checked empty and archives to, which an edit of the settings
    # changes only once it archived there)
    report["archivesTo"] = fields.get("checked") or ""
    mode = fields.get("archive_mode") or ""
    if mode and mode != "always":
        report.update(healthy=None, reason="NotArchivingYet",
                      message=f"the primary runs with archive_mode={mode} until the rollout restarts it")
        return report
    failing = bool(fields.get("error_at")) and int(fields.get("error_at") or 0) >= int(fields.get("last_ok") or 0)
    if failing:
        error = _decoded(fields.get("error", "")) or "failed without a message"
        report["lastError"] = error
        report["lastErrorAt"] = _epoch_iso(fields.get("error_at", ""))
        reason = "ArchiveNotEmpty" if "Expected empty archive" in error else next(
            (r for field, r in FIELD_REASONS.items() if error.startswith(f"spec.backup.objectStore.{field}: ")),
            "ArchivingFailing")
        if reason == "ArchiveNotEmpty":
            message = (f"spec.backup.objectStore.path: {location} already holds WAL of another database (or of an "
                       f"earlier one of this name): an archive holds one database's WAL; choose another path")
        elif error.startswith("spec."):  # (store.py named the field to fix)
            message = f"{error} (archiving to {location})"
        else:
            message = f"archiving to {location} fails: {error}"
        report.update(healthy=False, reason=reason, message=message)
        return report
    if report["gapFrom"]:
        report.update(healthy=False, reason="ArchiveGap", message=(
            f"the archive at {location} may miss WAL from {report['gapFrom']}: the primary let it go while it was a "
            f"standby and the archive failed (more than its share of its volume waited), and was promoted before the "
            f"old primary archived it"))
        return report
    if report["lastArchivedWal"]:
        message = f"{report['lastArchivedWal']} archived to {location} at {report['lastArchivedAt']}"
    else:
        message = f"archiving to {location}; no segment completed yet"
    report.update(healthy=True, reason="ArchivingWorks", message=message + f", {waiting} waiting")
    return report


class FilterModule:
    def filters(self):
        return {"sampledb_objectstore": sampledb_objectstore, "sampledb_archive_report": sampledb_archive_report,
                "sampledb_recovery_source": sampledb_recovery_source}
