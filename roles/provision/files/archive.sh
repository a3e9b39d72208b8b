#!/bin/bash
# archive.sh WAL: PostgreSQL's archive_command while spec.backup.objectStore is set (archive_mode=always), run by the
# archiver in PGDATA with the server's environment. It exits 0 only once WAL is safe in the object store, so anything
# else keeps the file in pg_wal (with its .ready mark) for the next attempt:
#  - on the primary, barman-cloud-wal-archive uploads it; the first upload to a destination checks that it holds no
#    WAL yet (barman-cloud-check-wal-archive): two databases archiving to one path would make it restore neither.
#    The destination checked is kept in PGDATA (a standby writes it too once it saw the primary archive there), so
#    that clones and a promoted replica do not check again;
#  - on a standby it is never uploaded (a rewound former primary's own WAL must not overwrite the archive's): it is
#    done once the primary says it archived that segment or a later one. A standby promoted then archives what it
#    received and the old primary had not archived yet, which archive_mode=on would have left out;
#  - each attempt's outcome is kept in the run directory, where `archive.sh --report` (the operator, by exec) reads
#    it with the count and age of the files waiting.
# The keys come from the Secret's files into barman's environment only: never on a command line, never in a log (an
# error is written with them replaced).
set -uo pipefail
: "${PGDATA:?}"
. /etc/sampledb/objectstore.env
run_dir=${PGHOST:-/var/run/postgresql}
ok_file=$run_dir/sampledb-archive-ok
error_file=$run_dir/sampledb-archive-error
marker=$PGDATA/sampledb-archive-checked
destination="$SAMPLEDB_S3_URL/$SAMPLEDB_S3_SERVER"

if [ "${1:-}" = --report ]; then
  # one line: now, the last success (epoch, segment), the last error (epoch, base64), the files waiting and the
  # oldest one's age (its .ready mark's time)
  read -r last_ok last_wal 2>/dev/null <"$ok_file" || { last_ok=""; last_wal=""; }
  read -r error_at error 2>/dev/null <"$error_file" || { error_at=""; error=""; }
  ready=0 oldest=""
  for f in "$PGDATA"/pg_wal/archive_status/*.ready; do
    [ -e "$f" ] || continue
    ready=$((ready + 1))
    t=$(stat -c %Y "$f" 2>/dev/null) || continue
    if [ -z "$oldest" ] || ((t < oldest)); then oldest=$t; fi
  done
  echo "now=$(date +%s) last_ok=$last_ok last_wal=$last_wal error_at=$error_at error=$error ready=$ready oldest_ready=$oldest destination=$destination"
  exit 0
fi

wal_path=${1:?usage: archive.sh WAL-PATH | --report}
wal=${wal_path##*/}
AWS_ACCESS_KEY_ID=$(<"$SAMPLEDB_S3_KEYS/ACCESS_KEY_ID") && AWS_SECRET_ACCESS_KEY=$(<"$SAMPLEDB_S3_KEYS/ACCESS_SECRET_KEY") || {
  echo "archive.sh: the object store's keys are not readable in $SAMPLEDB_S3_KEYS" >&2
  exit 1
}
export AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY AWS_DEFAULT_REGION=$SAMPLEDB_S3_REGION
# (an unreachable store fails in seconds, and the archiver tries again, rather than holding it for minutes)
export AWS_MAX_ATTEMPTS=2 AWS_RETRY_MODE=standard
s3_args=()
[ -n "$SAMPLEDB_S3_ENDPOINT" ] && s3_args+=(--endpoint-url "$SAMPLEDB_S3_ENDPOINT" --addressing-style path)

# Kept for --report: "epoch segment" after a success, "epoch base64(message)" after a failure (the keys replaced).
record() {
  local file=$1; shift
  printf '%s\n' "$*" >"$file.tmp" && mv -f "$file.tmp" "$file"
}
failed() {
  local message=$1
  message=${message//"$AWS_SECRET_ACCESS_KEY"/<secret access key>}
  message=${message//"$AWS_ACCESS_KEY_ID"/<access key id>}
  # (barman's last line, without its timestamp and pid)
  message=$(printf '%s' "$message" | grep -v '^\s*$' | tail -n 1 |
    sed -E 's/^[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9:,]+ \[[0-9]+\] [A-Z]+: //' | cut -c1-300)
  echo "archive.sh: $wal: $message" >&2
  record "$error_file" "$(date +%s) $(printf '%s' "$message" | base64 -w0)"
  exit 1
}

if [ -f "$PGDATA/standby.signal" ]; then
  # A standby: done once the primary archived this segment or a later one (history, partial and backup-label files
  # are the primary's to archive).
  [[ $wal =~ ^[0-9A-F]{24}$ ]] || exit 0
  for _ in 1 2 3 4 5; do
    last=$(PGPASSWORD="$POSTGRES_PASSWORD" PGCONNECT_TIMEOUT=3 psql -X -w -A -t -q -h "$PRIMARY_HOST" -p "$PRIMARY_PORT" \
      -U "${POSTGRES_USER:-postgres}" -d postgres -c "select last_archived_wal from pg_stat_archiver where not pg_is_in_recovery()" 2>/dev/null)
    if [[ $last =~ ^[0-9A-F]{24} ]] && [[ ! ${last:8:16} < ${wal:8:16} ]]; then
      # (this database archives there: promoted, this server need not check the destination is empty)
      [ "$(cat "$marker" 2>/dev/null)" = "$destination" ] ||
        { printf '%s\n' "$destination" >"$marker.tmp" && mv -f "$marker.tmp" "$marker"; }
      record "$ok_file" "$(date +%s) $wal"
      exit 0
    fi
    sleep 2
  done
  exit 1
fi

if [ "$(cat "$marker" 2>/dev/null)" != "$destination" ]; then
  out=$(barman-cloud-check-wal-archive "${s3_args[@]}" "$SAMPLEDB_S3_URL" "$SAMPLEDB_S3_SERVER" 2>&1) || failed "$out"
  printf '%s\n' "$destination" >"$marker.tmp" && mv -f "$marker.tmp" "$marker" || failed "cannot write $marker"
fi
compress=()
[ -n "$SAMPLEDB_S3_COMPRESSION" ] && compress=("--$SAMPLEDB_S3_COMPRESSION")
out=$(barman-cloud-wal-archive "${s3_args[@]}" "${compress[@]}" "$SAMPLEDB_S3_URL" "$SAMPLEDB_S3_SERVER" "$wal_path" 2>&1) ||
  failed "$out"
record "$ok_file" "$(date +%s) $wal"
rm -f "$error_file"
