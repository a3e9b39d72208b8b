#!/bin/bash
# Runs one SampleDB server, as the image's postgres user (the pod's securityContext; never root). Whether it is
# the primary or a streaming replica comes from its own pod label sampledb.example.com/role (the operator's
# leader role sets it; /etc/podinfo/labels is a downward API volume, refreshed while the pod runs):
#   - a new primary is initialised (initdb, then the replication role); a new replica is cloned from the
#     primary's Service (pg_basebackup -R: standby.signal, and primary_conninfo with the replication password);
#   - a replica relabelled "primary" promotes itself (pg_ctl promote);
#   - a primary relabelled "replica" (another server is to be promoted) stops and leaves the fence's mark
#     (role.sh; fenced.sh reads it); when the container starts again its data, which may have diverged, is kept
#     aside in $PGDATA.former-primary and it is cloned from the new primary;
#   - a replica that can no longer catch up (its stream is down and the primary has already recycled the WAL it
#     needs: there is no WAL archive and no replication slot) stops; its data is kept aside in $PGDATA.stale and
#     the restarted container clones the primary afresh;
#   - data of an older major version (a major upgrade) is kept aside in $PGDATA.v<major>, and the server starts
#     afresh: a primary empty (the operator's load Job fills it), a replica as a clone;
#   - SIGTERM or SIGINT (the pod is deleted) stops the server in fast mode: open sessions do not hold it up.
# bash is PID 1 of the container: every long step runs in the background and is waited for, so that a signal is
# handled at once (a trap waits for a foreground command to finish; PID 1 without a trap ignores SIGTERM).
set -euo pipefail
: "${PGDATA:?}" "${PRIMARY_HOST:?}" "${POSTGRES_PASSWORD:?}" "${REPLICATION_PASSWORD:?}"
POSTGRES_USER=${POSTGRES_USER:-postgres}
REPLICATION_USER=${REPLICATION_USER:-replicator}
PRIMARY_PORT=${PRIMARY_PORT:-${PGPORT:-5432}}
CONF=${CONF_DIR:-/etc/sampledb}
SERVER_OPTS=(-c "config_file=$CONF/postgresql.conf" -c "hba_file=$CONF/pg_hba.conf")
# the pod's name in process titles and in the primary's pg_stat_replication.application_name
[ -z "${POD_NAME:-}" ] || SERVER_OPTS+=(-c "cluster_name=$POD_NAME")

log() { echo "sampledb: $*" >&2; }
die() { log "$*"; exit 1; }

server="" child="" stopping=0
on_stop() {
  stopping=1
  if [ -n "$server" ]; then
    log "stopping the server (fast shutdown: open sessions are disconnected)"
    kill -INT "$server" 2>/dev/null || true
  fi
  [ -z "$child" ] || kill -TERM "$child" 2>/dev/null || true
}
trap on_stop TERM INT

# run CMD...: runs it in the background and waits for it; before the server runs, a stop request ends the script.
run() {
  local rc
  if [ "$stopping" = 1 ] && [ -z "$server" ]; then log "stopped before the server started"; exit 143; fi
  "$@" <&0 &  # (an asynchronous command's stdin is /dev/null unless redirected: keep the caller's)
  child=$!
  while :; do
    if wait "$child"; then rc=0; else rc=$?; fi
    kill -0 "$child" 2>/dev/null || break  # else the wait was interrupted by a signal: wait again
  done
  child=""
  if [ "$stopping" = 1 ] && [ -z "$server" ]; then log "stopped before the server started"; exit 143; fi
  return "$rc"
}

. "$(dirname "${BASH_SOURCE[0]}")/role.sh"  # role, locked, the fence's mark
major() { postgres --version | sed -E 's/^[^0-9]*([0-9]+).*$/\1/'; }
keep_aside() {  # keep_aside SUFFIX WHY: moves $PGDATA to $PGDATA.SUFFIX (replacing an earlier one)
  writable_volume
  log "$2: keeping $PGDATA as $PGDATA.$1"
  rm -rf "${PGDATA:?}.$1"
  mv "$PGDATA" "$PGDATA.$1"
}

# Wait for the operator to say what this server is.
for ((i = 0; i < ${LABEL_WAIT_SECONDS:-300}; i++)); do [ -n "$(role)" ] && break; run sleep 1; done
[ -n "$(role)" ] || die "no sampledb.example.com/role label in $LABELS after ${LABEL_WAIT_SECONDS:-300}s: is the operator running?"

# PGDATA is a directory of this server's user, mode 0700, as PostgreSQL requires; it (and the temporary ones beside
# it) are created in the data volume by this user, so the volume must be writable by it to create or replace it.
volume=$(dirname "$PGDATA")
if [ -e "$PGDATA" ]; then
  [ -O "$PGDATA" ] || die "the data directory $PGDATA belongs to uid $(stat -c %u "$PGDATA"), not to this server's uid $(id -u)"
  chmod 0700 "$PGDATA"  # an fsGroup change of the volume makes it group-writable, which the server refuses
fi
writable_volume() {
  if [ ! -w "$volume" ] || [ ! -x "$volume" ]; then
    die "the data volume $volume (mode $(stat -c %a "$volume"), owner $(stat -c %u:%g "$volume")) is not writable by uid $(id -u) (gid $(id -g), groups $(id -G)), so $PGDATA cannot be created or replaced: give the pod's securityContext an fsGroup the volume honours, or a volume created writable (local-path: mode 0777)"
  fi
}

upgraded_from=""
if [ -s "$PGDATA/PG_VERSION" ] && [ "$(cat "$PGDATA/PG_VERSION")" != "$(major)" ]; then
  upgraded_from=$(cat "$PGDATA/PG_VERSION")
  keep_aside "v$upgraded_from" "the data is PostgreSQL $upgraded_from and this is PostgreSQL $(major)"
fi
if [ -s "$PGDATA/PG_VERSION" ] && [ "$(role)" = replica ] && [ ! -f "$PGDATA/standby.signal" ]; then
  keep_aside former-primary "this server was a primary and is now a replica (its data may have diverged)"
fi
if [ -f "$PGDATA.reclone" ]; then
  [ ! -e "$PGDATA" ] || keep_aside stale "this replica fell behind what the primary keeps"
  rm -f "$PGDATA.reclone"
fi

if [ ! -s "$PGDATA/PG_VERSION" ]; then
  # Built beside PGDATA and renamed when complete: an interrupted initdb or clone is never taken for data.
  writable_volume
  new="$PGDATA.new"
  rm -rf "$new"
  if [ "$(role)" = primary ]; then
    log "initialising a new database"
    run initdb -D "$new" --username="$POSTGRES_USER" --pwfile=<(printf '%s\n' "$POSTGRES_PASSWORD") --auth=scram-sha-256
    # The replication role, with the server reachable only on its socket (not Ready meanwhile: the probes use TCP).
    run pg_ctl -D "$new" -w -o "-c config_file=$CONF/postgresql.conf -c hba_file=$CONF/pg_hba.conf -c listen_addresses='' -c synchronous_standby_names=''" start
    bootstrap_sql() { PGPASSWORD="$POSTGRES_PASSWORD" run psql -X -w -q -v ON_ERROR_STOP=1 -U "$POSTGRES_USER" -d postgres "$@"; }
    bootstrap_sql -v user="$REPLICATION_USER" -v pass="$REPLICATION_PASSWORD" \
      <<<"SELECT format('CREATE ROLE %I WITH REPLICATION LOGIN PASSWORD %L', :'user', :'pass') \gexec"
    if [ -n "$upgraded_from" ]; then
      # A major upgrade: this empty server must take no writes before the operator's load Job has filled it
      # (the load would drop them); restore.sh lifts this when the load is complete.
      log "read-only until the data of PostgreSQL $upgraded_from is loaded"
      bootstrap_sql -c "ALTER SYSTEM SET default_transaction_read_only = on"
    fi
    run pg_ctl -D "$new" -w -m fast stop
  else
    log "waiting for the primary at $PRIMARY_HOST:$PRIMARY_PORT"
    for ((i = 0; i < ${PRIMARY_WAIT_SECONDS:-600}; i += 2)); do
      pg_isready -q -h "$PRIMARY_HOST" -p "$PRIMARY_PORT" && break
      run sleep 2
    done
    pg_isready -q -h "$PRIMARY_HOST" -p "$PRIMARY_PORT" ||
      die "no primary accepting connections at $PRIMARY_HOST:$PRIMARY_PORT after ${PRIMARY_WAIT_SECONDS:-600}s: nothing to clone"
    log "cloning the primary at $PRIMARY_HOST:$PRIMARY_PORT"
    PGPASSWORD="$REPLICATION_PASSWORD" run pg_basebackup -h "$PRIMARY_HOST" -p "$PRIMARY_PORT" -U "$REPLICATION_USER" -w \
      -D "$new" -R -X stream --checkpoint=fast
  fi
  if [ -e "$PGDATA" ]; then keep_aside incomplete "there is no PG_VERSION in it"; fi
  mv "$new" "$PGDATA"
fi

# A replica's connection to the primary gives up on an address that does not answer: right after a change of
# primary, the Service may still send its first attempt to the pod that just went, and a SYN to an address that
# is gone waits for TCP's own give-up (30-70 s measured, during which a synchronous primary acknowledges
# nothing). The walreceiver connects asynchronously, so libpq's connect_timeout does not apply: TCP_USER_TIMEOUT
# does (the connect fails at the SYN's second retransmission, 3 s, and is tried again). pg_basebackup -R writes
# primary_conninfo without it; replicas cloned before this get it too.
auto_conf="$PGDATA/postgresql.auto.conf"
if [ -f "$PGDATA/standby.signal" ] && [ -f "$auto_conf" ] && ! grep -q "^primary_conninfo = '.*tcp_user_timeout=" "$auto_conf"; then
  sed -i "s/^primary_conninfo = '/primary_conninfo = 'tcp_user_timeout=${REPLICA_TCP_USER_TIMEOUT_MS:-3000} /" "$auto_conf"
fi

locked unfence_unless_replica
log "starting as $(role)"
postgres -D "$PGDATA" "${SERVER_OPTS[@]}" &
server=$!

# Whether this replica can still catch up: it is not streaming, and the primary no longer has the WAL segment of
# the position it must go on from (the primary compares the segment numbers; the timelines may differ). Any
# error (the primary is down, a server is starting) counts as "it can".
# (short timeouts: the loop that follows the label waits for these)
check_sql() {
  PGPASSWORD="$POSTGRES_PASSWORD" PGCONNECT_TIMEOUT=3 PGOPTIONS="-c statement_timeout=3000" \
    psql -X -w -A -t -q -U "$POSTGRES_USER" -d postgres "$@" 2>/dev/null
}
fell_behind() {
  local needed
  needed=$(check_sql -c "select case when exists (select from pg_stat_wal_receiver where status = 'streaming')
    then '' else greatest(pg_last_wal_receive_lsn(), pg_last_wal_replay_lsn())::text end") || return 1
  [ -n "$needed" ] || return 1
  [ "$(check_sql -h "$PRIMARY_HOST" -p "$PRIMARY_PORT" -v needed="$needed" <<'SQL'
select substr(pg_walfile_name(:'needed'::pg_lsn + 1), 9) < min(substr(name, 9)) from pg_ls_waldir() where name ~ '^[0-9A-F]{24}$'
SQL
  )" = t ]
}
behind_checks=0 loops=0 fencing=0

# Follow the label while the server runs.
while [ "$stopping" = 0 ] && kill -0 "$server" 2>/dev/null; do
  labelled=$(role)
  if [ "$labelled" = primary ] && [ -f "$PGDATA/standby.signal" ] && locked unfence_if_primary; then
    log "relabelled primary: promoting"
    pg_ctl -D "$PGDATA" -w promote &
    wait $! || [ "$stopping" = 1 ] || log "the promotion did not complete; trying again"
  elif [ "$labelled" = replica ] && [ ! -f "$PGDATA/standby.signal" ]; then
    log "relabelled replica while running as a primary: stopping (a restart clones the new primary)"
    fencing=1
    on_stop
  elif [ "$labelled" = replica ] && ((++loops % ${BEHIND_CHECK_LOOPS:-50} == 0)); then
    # (every BEHIND_CHECK_LOOPS loops, 10 s; stopped only when it is so on BEHIND_CHECKS checks in a row)
    if fell_behind; then behind_checks=$((behind_checks + 1)); else behind_checks=0; fi
    if ((behind_checks >= ${BEHIND_CHECKS:-3})); then
      log "the primary no longer has the WAL this replica needs to catch up: stopping (a restart clones it again)"
      touch "$PGDATA.reclone"
      on_stop
    fi
  fi
  # (a change of label is part of a switchover's write downtime: look often, it costs one sed)
  run sleep 0.2 || true
done
# A server told to stop for its replica label that has not stopped within FENCE_STOP_SECONDS (hung, or frozen) is
# ended with the container: when PID 1 exits, the kernel kills every process of the container, the server's
# included. The kubelet then shows the container stopped, and the operator promotes another server without
# having to delete this pod (its fence_timeout_seconds, then the pod's grace period).
# (counted in naps of 0.2 s: $SECONDS counts whole seconds, so a deadline from it comes up to a second early)
naps=0
while [ "$fencing" = 1 ] && kill -0 "$server" 2>/dev/null; do
  if ((naps++ >= ${FENCE_STOP_SECONDS:-10} * 5)); then
    log "the server did not stop within ${FENCE_STOP_SECONDS:-10}s of its replica label: ending the container, and every process in it"
    exit 137
  fi
  run sleep 0.2 || true
done
rc=0
while :; do
  if wait "$server"; then rc=0; else rc=$?; fi
  kill -0 "$server" 2>/dev/null || break
done
log "the server exited with status $rc"
if [ "$fencing" = 1 ]; then
  : >"$FENCED"
  # (the operator's fenced.sh, started by exec as the label changed, reads the mark in this container: exec into
  # one that has exited fails, and then the operator waits for the kubelet to report it)
  run sleep "${FENCED_LINGER_SECONDS:-3}" || true
fi
exit "$rc"
