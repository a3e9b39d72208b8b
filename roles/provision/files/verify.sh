#!/bin/bash
# verify.sh: a restore drill (spec.backup.verify), the command of the database's verify CronJob's Jobs. The newest
# completed base backup in the database's own archive and all the WAL archived since are restored into SCRATCH (an
# emptyDir of the data volume's size) and replayed by a server only this pod reaches (replay.sh); the drill passes when
# that server promotes and every database in it answers. Nothing is written to the archive (archive_command is empty).
# Writes to the termination log what the operator reports as status.lastVerifiedRecovery: the base backup, the time
# of the last transaction replayed, the timeline and how long it took; or the error, with the keys replaced.
set -uo pipefail
: "${SCRATCH:?}"
CONF=${CONF_DIR:-/etc/sampledb}
POSTGRES_USER=${POSTGRES_USER:-postgres}
report=${TERMINATION_LOG:-/dev/termination-log}
data=$SCRATCH/data run=$SCRATCH/run log_file=$SCRATCH/replay.log
. "$CONF/objectstore.sh"
. "$CONF/replay.sh"
recovery_failed() {
  local why
  why=$(redacted "${1:-${2:-}}")
  echo "verify.sh: the restore drill failed: ${why:-without a message}" >&2
  printf 'error=%s\n' "$(printf '%s' "${why:-the restore drill failed without a message}" | base64 -w0)" >"$report" 2>/dev/null || true
  [ -z "$replay_pid" ] || ! kill -0 "$replay_pid" 2>/dev/null || pg_ctl -D "$data" -w -m immediate stop >/dev/null 2>&1
  exit 1
}
objectstore_settings || recovery_failed "no $objectstore_env: the database has no spec.backup.objectStore"
objectstore_keys || recovery_failed "the object store's keys are not readable in $SAMPLEDB_S3_KEYS: see spec.backup.objectStore.credentials"
# (the drill recovers all the WAL there is: no target, whatever the environment says)
unset SAMPLEDB_RECOVERY_BACKUP_ID SAMPLEDB_RECOVERY_TARGET_TIME SAMPLEDB_RECOVERY_TARGET_LSN SAMPLEDB_RECOVERY_TARGET_XID \
  SAMPLEDB_RECOVERY_TARGET_NAME
started=$SECONDS
replay_archive "$data" "$run" "$log_file" "${JOB_NAME:-verify}"
sql() { psql -X -w -A -t -q -v ON_ERROR_STOP=1 -h "$run" -U "$POSTGRES_USER" "$@" 2>&1; }
# (the time of the last transaction replayed: none when no transaction followed the base backup)
recovered_to=$(sql -d postgres -c "select to_char(pg_last_xact_replay_timestamp() at time zone 'UTC',
  'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"')") || recovery_failed "the recovered server does not answer: $recovered_to"
timeline=$(sql -d postgres -c "select timeline_id from pg_control_checkpoint()") ||
  recovery_failed "the recovered server does not answer: $timeline"
databases=$(sql -d postgres -c "select datname from pg_database where datallowconn order by 1") ||
  recovery_failed "the recovered server does not list its databases: $databases"
count=0
# (each name as it is, in PGDATABASE: psql -d would take a name with = in it for a connection string)
while IFS= read -r db; do
  [ -n "$db" ] || continue
  answer=$(PGDATABASE=$db sql -c "select count(*) from pg_class") || recovery_failed "database $db does not answer: $answer"
  count=$((count + 1))
done <<<"$databases"
pg_ctl -D "$data" -w -m fast stop >/dev/null || recovery_failed "the recovered server did not stop"
replay_pid=""
fields="backup_id=$replay_backup_id${recovered_to:+ recovered_to=$recovered_to} timeline=$timeline databases=$count seconds=$((SECONDS - started))"
echo "verify.sh: passed: $fields" >&2
printf '%s\n' "$fields" >"$report"
