#!/bin/bash
# replay.sh, sourced: a recovery from an object store's archive into a directory, shared by entrypoint.sh (a database
# made by spec.restoreFrom.objectStore) and verify.sh (a restore drill, spec.backup.verify).
#
# replay_archive NEW BOOT LOG NAME: with objectstore.sh's settings and keys loaded (SAMPLEDB_S3_URL, s3_args, limit),
# restores a completed base backup of the archive (choose-base-backup.py: the newest that ends before
# SAMPLEDB_RECOVERY_TARGET_TIME or _LSN, or SAMPLEDB_RECOVERY_BACKUP_ID) into NEW, then starts a server there that
# only this pod reaches (its socket directory BOOT, no TCP: so it may trust the socket), which replays the archived WAL
# up to the target (SAMPLEDB_RECOVERY_TARGET_*; none: all of it) and promotes there, on a new timeline. Returns with
# that server running (replay_pid; replay_backup_id the base backup). The caller defines recovery_failed MESSAGE
# [DETAIL], which must stop the server when replay_pid runs, and exit.
replay_pid="" replay_backup_id=""
replay_archive() {
  local new=$1 boot=$2 log_file=$3 name=$4 store_server listing answer ready_for=0 waited=0 opts=()
  store_server=pg$(postgres --version | sed -E 's/^[^0-9]*([0-9]+).*$/\1/')
  answer=$(store_problem)
  [ -z "$answer" ] || recovery_failed "$answer"
  listing=$(timeout -k 5 "$limit" barman-cloud-backup-list "${s3_args[@]}" --format json "$SAMPLEDB_S3_URL" "$store_server" 2>&1) ||
    recovery_failed "barman-cloud-backup-list: $(explained "$listing")"
  replay_backup_id=$(printf '%s' "$listing" | "${BARMAN_PYTHON:-/opt/barman/bin/python}" "$CONF/choose-base-backup.py" \
    "${SAMPLEDB_RECOVERY_BACKUP_ID:-}" "${SAMPLEDB_RECOVERY_TARGET_TIME:-}" "${SAMPLEDB_RECOVERY_TARGET_LSN:-}" 2>&1) ||
    recovery_failed "the base backup could not be chosen: $replay_backup_id"
  # (an archive with no base backup at all: most often a path or a source's name that is not the archive meant)
  [[ $replay_backup_id != "error: there is no completed base backup"* ]] || recovery_failed "${SAMPLEDB_S3_FIELD:-spec.backup.objectStore}: \
$SAMPLEDB_S3_URL/$store_server holds no completed base backup: check its bucket, path and sourceName, and that the source \
took a physical backup there"
  [[ $replay_backup_id != error:* ]] || recovery_failed "${replay_backup_id#error: }"
  rm -rf "$new" "$boot" "$log_file"
  echo "replay.sh: recovering from $SAMPLEDB_S3_URL/$store_server: base backup $replay_backup_id" >&2
  answer=$(barman-cloud-restore "${s3_args[@]}" "$SAMPLEDB_S3_URL" "$store_server" "$replay_backup_id" "$new" 2>&1) ||
    recovery_failed "barman-cloud-restore: $(explained "$answer")"
  [ -f "$new/backup_label" ] ||
    recovery_failed "base backup $replay_backup_id has no backup_label: not a backup a server can start from"
  # (copied from a standby: it must end its recovery, not stream; the source's ALTER SYSTEM settings and its archive's
  # marks are not this database's: its settings are its spec's)
  rm -f "$new/standby.signal" "$new/postmaster.pid" "$new/sampledb-archive-gap" "$new/sampledb-archive-checked"
  : >"$new/postgresql.auto.conf"
  : >"$new/recovery.signal"
  (umask 077 && mkdir -p "$boot") || recovery_failed "could not make $boot"
  # barman-cloud-wal-restore exits 1 for a file the archive does not have (the end of the archive, to PostgreSQL: the
  # segments it lacked are kept, to tell the end from a gap) and otherwise for an error: tried again a few times (a store
  # that blinks), then it must stop the recovery (above 125), not end it where the store failed to answer.
  {
    printf '#!/bin/bash\nrestore=(timeout -k 5 %s barman-cloud-wal-restore' "$((limit * 4))"
    printf ' %q' "${s3_args[@]}" "$SAMPLEDB_S3_URL" "$store_server"; printf ')\nmissing=%q\n' "$boot/missing"
    cat <<'SCRIPT'
for try in 1 2 3 4; do
  "${restore[@]}" "$1" "$2"
  rc=$?
  if [ "$rc" -eq 1 ] && [[ $1 =~ ^[0-9A-F]{24}$ ]]; then printf '%s\n' "$1" >>"$missing"; fi
  [ "$rc" -gt 1 ] || exit "$rc"
  sleep $((try * 5))
done
exit 255
SCRIPT
  } >"$boot/restore.sh"
  printf 'local all all trust\n' >"$boot/pg_hba.conf"
  # (hot_standby off: no connection before the promotion, and no pause for a setting the source had higher; no
  # logical replication workers: a subscription restored with the data must not take its publisher's changes here)
  opts=(-c "config_file=$CONF/postgresql.conf" -c "hba_file=$boot/pg_hba.conf" -c "listen_addresses="
        -c "unix_socket_directories=$boot" -c "synchronous_standby_names=" -c "archive_command="
        -c "restore_command=/bin/bash $boot/restore.sh %f %p" -c "recovery_target_action=promote"
        -c "cluster_name=$name" -c "hot_standby=off" -c "max_logical_replication_workers=0")
  # (with archive_mode always, every segment restored would wait for an archiver that does not run here, and fill the
  # volume; on, only the new timeline's do)
  ! grep -q '^archive_mode' "$CONF/postgresql.conf" || opts+=(-c "archive_mode=on")
  [ -z "${SAMPLEDB_RECOVERY_TARGET_TIME:-}" ] || opts+=(-c "recovery_target_time=$SAMPLEDB_RECOVERY_TARGET_TIME")
  [ -z "${SAMPLEDB_RECOVERY_TARGET_LSN:-}" ] || opts+=(-c "recovery_target_lsn=$SAMPLEDB_RECOVERY_TARGET_LSN")
  [ -z "${SAMPLEDB_RECOVERY_TARGET_XID:-}" ] || opts+=(-c "recovery_target_xid=$SAMPLEDB_RECOVERY_TARGET_XID")
  [ -z "${SAMPLEDB_RECOVERY_TARGET_NAME:-}" ] || opts+=(-c "recovery_target_name=$SAMPLEDB_RECOVERY_TARGET_NAME")
  postgres -D "$new" "${opts[@]}" >>"$log_file" 2>&1 &
  replay_pid=$!
  # Replays for as long as the archive holds WAL up to the target; promoted there, or stopped when it cannot get there:
  # then its log's last FATAL or PANIC, other than the refusals of this loop's early connections, says why. Once the
  # server says it is ready, a superuser that cannot connect within a minute is a recovery that cannot finish.
  until answer=$(psql -X -w -A -t -q -h "$boot" -U "$POSTGRES_USER" -d postgres -c 'select pg_is_in_recovery()' 2>&1) &&
      [ "$answer" = f ]; do
    if ! kill -0 "$replay_pid" 2>/dev/null; then
      replay_pid=""
      recovery_failed "$(grep -E ' (FATAL|PANIC): ' "$log_file" | grep -vE 'starting up|accepting connections' |
        tail -n 1 | sed -E 's/^.* (FATAL|PANIC): +//')" "$(tail -n 3 "$log_file" 2>/dev/null)"
    fi
    if grep -q 'database system is ready to accept connections' "$log_file" 2>/dev/null; then
      ready_for=$((ready_for + 1))
      [ "$ready_for" -lt 60 ] || recovery_failed "the recovered server does not let $POSTGRES_USER in: $answer"
    fi
    sleep 1
    waited=$((waited + 1))
    [ $((waited % 60)) -ne 0 ] ||
      echo "replay.sh: recovering: $(grep -E 'restored log file|redo ' "$log_file" | tail -n 1)" >&2
  done
  # With no target the replay ends at the first WAL file the archive does not have: the archive's end, unless it holds
  # later ones on that timeline (a gap: a file lost, or one a standby let go before the primary archived it), and then
  # what follows the gap is not recovered: that is a failure, not a recovery.
  local targets="${SAMPLEDB_RECOVERY_TARGET_TIME:-}${SAMPLEDB_RECOVERY_TARGET_LSN:-}"
  targets+="${SAMPLEDB_RECOVERY_TARGET_XID:-}${SAMPLEDB_RECOVERY_TARGET_NAME:-}"
  if [ -z "$targets" ] && [ -s "$boot/missing" ]; then
    local beyond rc=0 lacked later
    beyond=$(SAMPLEDB_S3_URL=$SAMPLEDB_S3_URL SAMPLEDB_S3_ENDPOINT=${SAMPLEDB_S3_ENDPOINT:-} \
      SAMPLEDB_S3_SERVER=$store_server timeout -k 5 "$limit" "${BARMAN_PYTHON:-/opt/barman/bin/python}" \
      "$CONF/store.py" beyond $(<"$boot/missing") 2>&1) || rc=$?
    [ "$rc" -ne 124 ] || recovery_failed "the archive's WAL could not be listed within ${limit}s"
    [ "$rc" -eq 0 ] || recovery_failed "the archive's WAL could not be listed: $(redacted "$beyond")"
    read -r lacked later <<<"$beyond"
    [ -z "$later" ] || recovery_failed "the archive has a gap: it lacks $lacked but holds WAL up to $later; what \
was written after the gap cannot be recovered from it (a target before it can)"
  fi
}
