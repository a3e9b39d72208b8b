#!/bin/bash
# base-backup.sh: a physical backup (SampleDBBackup spec.method physical), the command of its Job. The Job mounts the
# data volume of the server it backs up (a streaming replica when there is one, PGHOST) read-only where that server
# has it, on that server's node: barman-cloud-backup copies that data directory to the database's archive
# (<url>/pg<major>/base/<id>) between pg_backup_start and pg_backup_stop on that server, named BACKUP_NAME.POD_UID
# (unique: a name reused, or a Job's retry, never matches two backups; never one of barman's reserved words). (On a
# standby, pg_backup_stop waits until the primary archived the backup's last WAL: archive_timeout bounds that wait.)
# Then it writes what the operator reports to the termination log: the backup's id, begin and end LSN, WAL and time,
# timeline and size. The keys reach barman's environment only; an error is written with them replaced.
set -uo pipefail
: "${PGDATA:?}" "${BACKUP_NAME:?}" "${POD_UID:?}"
name=$BACKUP_NAME.$POD_UID
. "$(dirname "${BASH_SOURCE[0]}")/objectstore.sh"
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
report=${TERMINATION_LOG:-/dev/termination-log}
fail() {
  local message
  message=$(redacted "$1")
  echo "base-backup.sh: ${message:-barman-cloud-backup failed, without a message}" >&2
  printf 'error=%s\n' "$(printf '%s' "$message" | base64 -w0)" >"$report" 2>/dev/null || true
  exit 1
}
objectstore_settings || fail "no $objectstore_env: the database has no spec.backup.objectStore"
objectstore_keys || fail "the object store's keys are not readable in $SAMPLEDB_S3_KEYS: see spec.backup.objectStore.credentials"
major=$(cat "$PGDATA/PG_VERSION" 2>/dev/null) || fail "no $PGDATA/PG_VERSION: the volume mounted holds no database"
major=${major%%.*}
server=pg$major
# barman copies the configuration files the server names, which lie outside PGDATA in the server's run directory
# (RUN_DIR, as entrypoint.sh writes them): the same files here, from the same ConfigMap, less what the operator adds
# while it runs (synchronous_standby_names, a fence). A restore is configured by the operator, not by these copies.
conf=$(dirname "${BASH_SOURCE[0]}")
if [ -n "${RUN_DIR:-}" ]; then
  printf "include '%s'\n" "$conf/postgresql.conf" >"$RUN_DIR/runtime.conf" && cp "$conf/pg_hba.conf" "$RUN_DIR/pg_hba.conf" \
    || fail "could not lay out the server's configuration files in $RUN_DIR"
fi

# (a final backup, REQUIRE_FENCE: taken from the primary once its clients are kept out, so that its end, and the WAL
# archived up to it, come after every write it acknowledged)
wait_for_fence >&2 || fail "the server $PGHOST did not fence its clients ($REQUIRE_FENCE) within ${PG_WAIT_SECONDS:-300}s"
# (barman-cloud-backup would create a bucket that is not there: a typo's)
problem=$(store_problem)
[ -z "$problem" ] || fail "$problem"
log=$(barman-cloud-backup "${s3_args[@]}" "${compress[@]}" --immediate-checkpoint --name "$name" \
  --host "$PGHOST" --port "${PGPORT:-5432}" --user "${PGUSER:-postgres}" --dbname postgres \
  "$SAMPLEDB_S3_URL" "$server" 2>&1) || fail "$(explained "$log")"
# spec.backup.retentionPolicy: the base backups (and the WAL only they need) that no recovery in the window needs go,
# now that a newer one is there. A failure here leaves the backup done and says so.
retention=""
if [ -n "${SAMPLEDB_RETENTION_POLICY:-}" ]; then
  pruned=$(timeout -k 5 $((limit * 10)) barman-cloud-backup-delete "${s3_args[@]}" \
    --retention-policy "$SAMPLEDB_RETENTION_POLICY" "$SAMPLEDB_S3_URL" "$server" 2>&1) ||
    retention=" retention_error=$(printf '%s' "$(redacted "$pruned")" | base64 -w0)"
fi
# What the store holds, read once (each read is every backup.info): this backup's fields as key=value pairs, each
# value one word, and the oldest DONE backup, when a recovery can reach back to (its end). In barman's own Python.
listing=$(timeout -k 5 "$limit" barman-cloud-backup-list "${s3_args[@]}" --format json "$SAMPLEDB_S3_URL" "$server" \
  2>/dev/null) || fail "$(explained "barman-cloud-backup-list could not read $SAMPLEDB_S3_URL/$server")"
fields=$(printf '%s' "$listing" | NAME=$name "${BARMAN_PYTHON:-/opt/barman/bin/python}" -c '
import json, os, sys
backups = json.load(sys.stdin).get("backups_list", [])
info = next((b for b in backups if b.get("backup_name") == os.environ["NAME"]), {})
pairs = {"id": info.get("backup_id"), "name": info.get("backup_name"), "begin_lsn": info.get("begin_xlog"), "end_lsn": info.get("end_xlog"),
         "begin_wal": info.get("begin_wal"), "end_wal": info.get("end_wal"), "timeline": info.get("timeline"),
         "begin_time": info.get("begin_time_iso"), "end_time": info.get("end_time_iso"), "status": info.get("status")}
done = sorted((b for b in backups if b.get("status") == "DONE"), key=lambda b: b["backup_id"])
if done:
    pairs.update(oldest_kept=done[0]["backup_id"], first_recoverability=done[0].get("end_time_iso"))
print(" ".join(f"{k}={str(v).replace(chr(32), chr(84))}" for k, v in pairs.items() if v not in (None, "")))
') || fail "barman-cloud-backup-list said: $listing"
[[ " $fields " == *" status=DONE "* ]] || fail "the backup $name is not done: $fields"
# (barman-cloud records no size: the data directory's, as copied, before compression; pg_wal's segments are not copied)
size=$(du -sb --exclude=pg_wal "$PGDATA" 2>/dev/null | cut -f1)
[ -z "$size" ] || fields+=" size=$size"
fields+=$retention
# (the archive it went to, as this Job read the settings: an edit since does not move it)
fields+=" archive=$SAMPLEDB_S3_URL/$server"
echo "base-backup.sh: $fields" >&2
printf '%s server=%s\n' "$fields" "${SOURCE_SERVER:-}" >"$report"
