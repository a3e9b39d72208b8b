#!/bin/bash
# archive.sh WAL: PostgreSQL's archive_command while spec.backup.objectStore is set (archive_mode=always), run by the
# archiver in PGDATA with the server's environment. It exits 0 only once WAL is safe in the object store, so anything
# else keeps the file in pg_wal (with its .ready mark) for the next attempt (never above 125: PostgreSQL would take
# that for a fatal failure of its archiver):
#  - on the primary, barman-cloud-wal-archive uploads it to <url>/pg<major> (the data's major version, PG_VERSION:
#    a major upgrade starts a new database, whose WAL names begin again, so each major archives apart). The first
#    upload to a destination checks that it holds no WAL yet (barman-cloud-check-wal-archive): two databases
#    archiving to one path would make it restore neither. The destination checked is kept in PGDATA; a standby
#    copies the primary's once it saw the primary archive there, so that a promoted replica does not check again;
#  - on a standby it is never uploaded (a rewound former primary's own WAL must not overwrite the archive's): it is
#    done once the primary says it archived that file or a later one (timeline first). A standby promoted then
#    archives what it received and the old primary had not archived yet, which archive_mode=on would leave out. A
#    standby holds back at most SAMPLEDB_STANDBY_HOLD_MB of WAL so: past that it lets go rather than fill its volume
#    while the archive fails, and keeps the first file it let go in PGDATA (sampledb-archive-gap) until the primary
#    archived past it: promoted meanwhile, it reports that the archive may miss WAL from there;
#  - a server being stopped (the entrypoint's mark in the run directory) uploads nothing more: its shutdown waits
#    for the archiver, and the WAL left is archived after its restart, or by the standby promoted in its place;
#  - each attempt's outcome is kept in the run directory, where `archive.sh --report` (the operator, by exec) reads
#    it with the count and age of the files waiting, the server's archive_mode and any gap.
# The keys come from the Secret's files into barman's environment only: never on a command line, never in a log (an
# error is written with them replaced).
set -uo pipefail
: "${PGDATA:?}"
run_dir=${PGHOST:-/var/run/postgresql}
ok_file=$run_dir/sampledb-archive-ok
error_file=$run_dir/sampledb-archive-error
stopping_file=$run_dir/sampledb-stopping
marker=$PGDATA/sampledb-archive-checked
gap_file=$PGDATA/sampledb-archive-gap
report=""; [ "${1:-}" = --report ] && report=1

# Kept for --report: "epoch segment" after a success, "epoch base64(message)" after a failure (the keys replaced).
record() {
  local file=$1; shift
  printf '%s\n' "$*" >"$file.tmp" && mv -f "$file.tmp" "$file"
}
b64() { printf '%s' "$1" | base64 -w0; }
. "$(dirname "${BASH_SOURCE[0]}")/objectstore.sh"
failed() {
  local code=$1 message
  message=$(redacted "$2")
  case $code in
    124|137) message="no answer from the object store within ${limit:-?}s (or killed)${message:+: $message}" ;;
    *) message=${message:-"exit status $code, no message"} ;;
  esac
  echo "archive.sh: ${wal:-}: $message" >&2
  record "$error_file" "$(date +%s) $(b64 "$message")"
  if [ -n "$report" ]; then echo "now=$(date +%s) error_at=$(date +%s) error=$(b64 "$message")"; exit 0; fi
  exit 1
}
# failed, for a barman-cloud call that ended with RC and printed OUT: explained by the store's own answer when that
# names a field (keys refused, no bucket, no answer), unless the call timed out
call_failed() {
  local rc=$1 out=$2
  [[ $rc == 124 || $rc == 137 ]] || out=$(explained "$out")
  failed "$rc" "$out"
}

objectstore_settings || failed 1 "no $objectstore_env: spec.backup.objectStore is not rolled out to this server yet"
major=$(cat "$PGDATA/PG_VERSION" 2>/dev/null) || failed 1 "no $PGDATA/PG_VERSION: this server holds no database"
major=${major%%.*}
destination="$SAMPLEDB_S3_URL/pg$major"

if [ -n "$report" ]; then
  # one line: now, the last success (epoch, segment), the last error (epoch, base64), the files waiting and the
  # oldest one's age (its .ready mark's time), the server's archive_mode, the first WAL a standby let go (if any), the
  # destination checked empty and archived to since
  read -r last_ok last_wal 2>/dev/null <"$ok_file" || { last_ok=""; last_wal=""; }
  read -r error_at error 2>/dev/null <"$error_file" || { error_at=""; error=""; }
  read -r gap 2>/dev/null <"$gap_file" || gap=""
  read -r checked 2>/dev/null <"$marker" || checked=""
  ready=0 oldest=""
  for f in "$PGDATA"/pg_wal/archive_status/*.ready; do
    [ -e "$f" ] || continue
    ready=$((ready + 1))
    t=$(stat -c %Y "$f" 2>/dev/null) || continue
    if [ -z "$oldest" ] || ((t < oldest)); then oldest=$t; fi
  done
  mode=$(PGPASSWORD="$POSTGRES_PASSWORD" PGCONNECT_TIMEOUT=3 timeout -k 2 10 psql -X -w -A -t -q -d postgres \
    -c "show archive_mode" 2>/dev/null)
  echo "now=$(date +%s) last_ok=$last_ok last_wal=$last_wal error_at=$error_at error=$error ready=$ready oldest_ready=$oldest destination=$destination archive_mode=$mode gap=$gap checked=$checked"
  exit 0
fi

wal_path=${1:?usage: archive.sh WAL-PATH | --report}
wal=${wal_path##*/}

if [ -f "$PGDATA/standby.signal" ]; then
  # A standby: done once the primary archived this file or a later one, timeline first (history and backup-label
  # files are the primary's to archive; a backup label stands for its segment). One quick question: the archiver
  # asks again.
  [[ $wal =~ ^[0-9A-F]{24}$ ]] || exit 0
  read -r last checked < <(PGPASSWORD="$POSTGRES_PASSWORD" PGCONNECT_TIMEOUT=3 timeout -k 2 10 psql -X -w -A -t -q \
    -F ' ' -h "$PRIMARY_HOST" -p "$PRIMARY_PORT" -U "${POSTGRES_USER:-postgres}" -d postgres -c \
    "select last_archived_wal, pg_read_file('sampledb-archive-checked', 0, 1024, true) from pg_stat_archiver
     where not pg_is_in_recovery()" 2>/dev/null)
  [[ ${last:-} =~ ^([0-9A-F]{24})\.[0-9A-F]{8}\.backup$ ]] && last=${BASH_REMATCH[1]}
  if [[ ${last:-} =~ ^[0-9A-F]{24}$ ]] && [[ ! $last < $wal ]]; then
    # (the primary archives where this server would: promoted, it need not check the destination again)
    if [ "${checked:-}" = "$destination" ] && [ "$(cat "$marker" 2>/dev/null)" != "$destination" ]; then
      printf '%s\n' "$destination" >"$marker.tmp" && mv -f "$marker.tmp" "$marker"
    fi
    # (what it let go before, the primary has archived since: no gap)
    if read -r gap 2>/dev/null <"$gap_file" && [[ ! $last < $gap ]]; then rm -f "$gap_file"; fi
    record "$ok_file" "$(date +%s) $wal"
    exit 0
  fi
  held=$(find "$PGDATA/pg_wal/archive_status" -name '[0-9A-F]*.ready' 2>/dev/null | wc -l)
  if ((held * 16 > ${SAMPLEDB_STANDBY_HOLD_MB:-1024})); then
    message="this standby let $wal go before the primary archived it: it held more than ${SAMPLEDB_STANDBY_HOLD_MB:-1024} MB of WAL for the archive; promoted before the primary archives past it, the archive would miss WAL from there"
    echo "archive.sh: $message" >&2
    [ -s "$gap_file" ] || printf '%s\n' "$wal" >"$gap_file"
    record "$error_file" "$(date +%s) $(b64 "$message")"
    exit 0
  fi
  exit 1
fi

if [ -e "$stopping_file" ]; then
  echo "archive.sh: $wal: the server is stopping; it is archived after the restart, or by the standby promoted" >&2
  exit 1
fi
objectstore_keys ||
  failed 1 "spec.backup.objectStore.credentials: the keys in $SAMPLEDB_S3_KEYS are missing or empty"
# (a call that times out, 124 or 137, becomes this script's 1, as every failure does)

if [ "$(cat "$marker" 2>/dev/null)" != "$destination" ]; then
  # (barman would create a bucket that is not there: a typo's, or one these keys may not make)
  problem=$(store_problem)
  [ -z "$problem" ] || failed 1 "$problem"
  out=$(timeout -k 5 "$limit" barman-cloud-check-wal-archive "${s3_args[@]}" "$SAMPLEDB_S3_URL" "pg$major" 2>&1) ||
    call_failed $? "$out"
  printf '%s\n' "$destination" >"$marker.tmp" && mv -f "$marker.tmp" "$marker" || failed 1 "cannot write $marker"
fi
out=$(timeout -k 5 "$limit" barman-cloud-wal-archive "${s3_args[@]}" "${compress[@]}" "$SAMPLEDB_S3_URL" \
  "pg$major" "$wal_path" 2>&1) || call_failed $? "$out"
record "$ok_file" "$(date +%s) $wal"
rm -f "$error_file"
