#!/bin/bash
# Runs one SampleDB server, as the image's postgres user (the pod's securityContext; never root). What it is comes
# from its own pod's label and annotations, set by the operator (role.sh):
#   - labelled primary: an empty volume is initialised only when the operator says so (bootstrap annotation, or a
#     major upgrade's new server), else the server waits: an initialised database never gets an empty primary;
#   - labelled replica: an empty volume is cloned from the primary's Service; a volume that was a primary's is
#     rewound to the new primary's history (pg_rewind) and follows it, or, if that fails, kept aside
#     ($PGDATA.former-primary) and cloned;
#   - a replica relabelled primary promotes itself (pg_ctl promote); a primary relabelled replica stops (fast
#     shutdown sends its replicas every WAL record it wrote) and leaves the fence's mark (role.sh), then rejoins as a
#     replica;
#   - data of another major version is kept aside ($PGDATA.v<major>) only during a major upgrade from that version,
#     and taken back when the operator rolls the upgrade back; otherwise the server does not start and says why;
#   - a replica that can no longer catch up (its stream is down and the primary has recycled the WAL it needs) stops;
#     its data is kept aside ($PGDATA.stale) and it starts again, cloning the primary afresh; kept-aside copies
#     are removed once the replica streams again;
#   - the primary keeps a replication slot for each other server (a replica that was down catches up);
#   - synchronous_standby_names and the fence (only the superuser and the replicas may connect: a major upgrade's dump,
#     the final backup) follow the annotations without a restart, and so do changes of the configuration files;
#   - SIGTERM or SIGINT (the pod is deleted) stops the server in fast mode: open sessions do not hold it up.
# Every time this server starts taking writes and every time its server stops, a line goes to sampledb-history.log on
# its volume: the server's own record of when it could have taken writes (a server ended without one gets an "ended"
# line at its last write when its volume is next started).
# bash is PID 1 of the container: every long step runs in the background and is waited for, so that a signal is
# handled at once (a trap waits for a foreground command to finish; PID 1 without a trap ignores SIGTERM).
set -euo pipefail
: "${PGDATA:?}" "${PRIMARY_HOST:?}" "${POSTGRES_PASSWORD:?}" "${REPLICATION_PASSWORD:?}"
POSTGRES_USER=${POSTGRES_USER:-postgres}
REPLICATION_USER=${REPLICATION_USER:-replicator}
PRIMARY_PORT=${PRIMARY_PORT:-${PGPORT:-5432}}
CONF=${CONF_DIR:-/etc/sampledb}
ME=${POD_NAME:-$HOSTNAME}

log() { echo "sampledb: $*" >&2; }

server="" child="" stopping=0 terminated=0 fencing=0 termed=0
# (archive.sh uploads nothing more once this is there: the shutdown waits for the archiver, and the WAL left is
# archived after the restart or by the standby promoted instead)
STOPPING_MARK=${PGHOST:-/var/run/postgresql}/sampledb-stopping
on_stop() {
  stopping=1
  if [ -n "$server" ]; then
    log "stopping the server (fast shutdown: open sessions are disconnected)"
    : >"$STOPPING_MARK" 2>/dev/null || true
    kill -INT "$server" 2>/dev/null || true
  fi
  [ -z "$child" ] || kill -TERM "$child" 2>/dev/null || true
}
on_signal() { terminated=1; on_stop; }
trap on_signal TERM INT

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

. "$(dirname "${BASH_SOURCE[0]}")/role.sh"  # role, annotations, the fence's mark
# nap SECONDS: a wait that starts no process (the loops below wait five times a second, in every server): a read from a
# pipe nobody writes to. A trapped signal is handled at once; the nap then ends when it would have.
exec {NAP_FD}<> <(:)
nap() { read -r -t "$1" -u "$NAP_FD" _ || (($? > 128)) || sleep "$1"; }  # (a read that fails, not times out, never spins)
# Until this script starts a server, the liveness probe lets it be: it waits, rewinds or clones (after a stop on purpose
# it starts again in the same container, past the startup probe).
STARTING="$RUN_DIR/sampledb-starting"
: >"$STARTING" 2>/dev/null || true
rm -f "$RUN_DIR/sampledb-recovering"  # (a recovery ended by a signal leaves it: one starts again below, if asked)
major() { postgres --version | sed -E 's/^[^0-9]*([0-9]+).*$/\1/'; }
volume=$(dirname "$PGDATA")
history() { printf '%s %s %s\n' "$(date +%s.%N)" "$ME" "$1" >>"$volume/sampledb-history.log" 2>/dev/null || true; }

# While waiting (for a label, a primary, an instruction), say why once, not every second.
waiting=""
wait_note() { [ "$1" = "$waiting" ] || log "$1"; waiting=$1; }

# The primary's term (LEASE_TERM_SECONDS, when the operator's servers annotation lists more than one server): the
# pod's Lease agent (lease-agent.py) writes "<holder> <uptime when the read was sent>" after each read of the
# database's Lease that succeeded, and why the last one failed to sampledb-lease-error. This server starts or is
# promoted as the primary, and keeps running as one, only while a read sent less than a term ago named it, so a
# primary cut off from the API server stops taking writes within its term. (A single server has nothing to be
# promoted in its place.)
LEASE_FILE="$RUN_DIR/sampledb-lease"
term_holds() {  # (builtins first: it runs five times a second on a primary)
  [ -n "${LEASE_TERM_SECONDS:-}" ] || return 0
  local holder="" sent="" now=""
  { read -r holder sent <"$LEASE_FILE"; } 2>/dev/null || true
  read -r now _ </proc/uptime
  if [ "$holder" = "$ME" ] && [[ "$sent" =~ ^[0-9]+\.[0-9]{2}$ ]] &&
      ((10#${now/./} < 10#${sent/./} + LEASE_TERM_SECONDS * 100)); then
    return 0
  fi
  local servers
  read_annotation servers servers
  [[ "$servers" != *,* ]]  # (a single server: no term)
}
lease_news() {  # what the agent last read, and why its last read failed
  local holder="" sent="" error
  { read -r holder sent <"$LEASE_FILE"; } 2>/dev/null || true
  error=$(cat "$LEASE_FILE-error" 2>/dev/null || true)
  printf 'the last read of the Lease named %s%s' "${holder:-nobody (no read yet)}" "${error:+; the agent says: $error}"
}

writable_volume() {
  if [ ! -w "$volume" ] || [ ! -x "$volume" ]; then
    log "the data volume $volume (mode $(stat -c %a "$volume"), owner $(stat -c %u:%g "$volume")) is not writable by uid $(id -u) (gid $(id -g), groups $(id -G)), so $PGDATA cannot be created or replaced: give the pod's securityContext an fsGroup the volume honours, or a volume created writable (local-path: mode 0777)"
    exit 1
  fi
}
keep_aside() {  # keep_aside SUFFIX WHY: moves $PGDATA to $PGDATA.SUFFIX (an earlier copy of that kind is kept too)
  writable_volume
  local dest="$PGDATA.$1" n=1
  while [ -e "$dest" ]; do dest="$PGDATA.$1.$((n++))"; done
  log "$2: keeping $PGDATA as $dest"
  mv "$PGDATA" "$dest" || { log "could not move $PGDATA to $dest"; return 1; }
}
if [ -e "$PGDATA" ]; then
  [ -O "$PGDATA" ] || { log "the data directory $PGDATA belongs to uid $(stat -c %u "$PGDATA"), not to this server's uid $(id -u)"; exit 1; }
  chmod 0700 "$PGDATA"  # an fsGroup change of the volume makes it group-writable, which the server refuses
fi
# A server that was killed without a record (SIGKILL after a short grace, out of memory) last wrote when the newest
# file of its data directory says: it acknowledged no commit after that (a commit is acknowledged once its WAL is
# flushed). That time closes its history's open "writable", never before the "writable" itself. (After a power loss
# the file times themselves may not have reached the disk: then the record is only as good as they are.)
if [ -d "$PGDATA" ] && [ "$(tail -n 1 "$volume/sampledb-history.log" 2>/dev/null | cut -d' ' -f3)" = writable ]; then
  last=$({ tail -n 1 "$volume/sampledb-history.log" | cut -d' ' -f1; find "$PGDATA" -type f -printf '%T@\n'; } 2>/dev/null |
    sort -g | tail -n 1) || true
  [ -z "$last" ] || printf '%s %s ended\n' "$last" "$ME" >>"$volume/sampledb-history.log" 2>/dev/null || true
fi

# Passwords reach libpq (the replicas' stream, pg_rewind, pg_basebackup, the checks below) through a password file in
# the run directory, never through a command line or postgresql.auto.conf.
pgpass_field() { printf '%s' "$1" | sed 's/[\\:]/\\&/g'; }
(umask 077 && printf '*:*:*:%s:%s\n*:*:*:%s:%s\n' "$(pgpass_field "$REPLICATION_USER")" "$(pgpass_field "$REPLICATION_PASSWORD")" \
  "$(pgpass_field "$POSTGRES_USER")" "$(pgpass_field "$POSTGRES_PASSWORD")" >"$RUN_DIR/.pgpass")
export PGPASSFILE="$RUN_DIR/.pgpass"
primary_ready() { pg_isready -q -h "$PRIMARY_HOST" -p "$PRIMARY_PORT" -t 3; }
slot_of() { printf 'sdb_%s' "${1//-/_}"; }
# The configuration files as they are now (to notice a change each second, with builtins only)
conf_files() {
  local __f __part
  printf -v "$1" ''
  for __f in "$CONF/postgresql.conf" "$CONF/pg_hba.conf"; do
    __part=""
    IFS= read -r -d '' __part 2>/dev/null <"$__f" || true
    printf -v "$1" '%s%s\1' "${!1}" "$__part"
  done
}

# What this server is started with: the ConfigMap's files, and what the annotations add (runtime.conf, the pg_hba.conf
# in force), both in the run directory.
fence_swept=""  # the fence whose clients have been disconnected (then the server says so: sampledb.fence)
# Returns 1 when both were already so (each second: builtins only, and files written only when they change).
write_runtime() {
  local sync fence servers runtime hba="" was_runtime="" was_hba=""
  read_annotation sync synchronous-standby-names
  read_annotation fence fence
  read_annotation servers servers
  printf -v runtime "include '%s'\n" "$CONF/postgresql.conf"
  if [ -n "$sync" ] || [ -n "$servers" ]; then printf -v runtime "%ssynchronous_standby_names = '%s'\n" "$runtime" "${sync//\'/\'\'}"; fi
  [ -z "$fence_swept" ] || printf -v runtime "%ssampledb.fence = '%s'\n" "$runtime" "$fence_swept"
  if [ -z "$fence" ]; then
    IFS= read -r -d '' hba <"$CONF/pg_hba.conf" || [ -f "$CONF/pg_hba.conf" ] || return 1
  else
    printf -v hba '%s\n' "# fenced ($fence): only the superuser and the replicas connect" \
      "local all $POSTGRES_USER scram-sha-256" "host all $POSTGRES_USER all scram-sha-256" \
      "host replication $REPLICATION_USER all scram-sha-256" "local all all reject" "host all all all reject"
  fi
  IFS= read -r -d '' was_runtime 2>/dev/null <"$RUN_DIR/runtime.conf" || true
  IFS= read -r -d '' was_hba 2>/dev/null <"$RUN_DIR/pg_hba.conf" || true
  [ "$runtime" != "$was_runtime" ] || [ "$hba" != "$was_hba" ] || return 1
  printf '%s' "$runtime" >"$RUN_DIR/runtime.conf.new"
  printf '%s' "$hba" >"$RUN_DIR/pg_hba.conf.new"
  mv "$RUN_DIR/runtime.conf.new" "$RUN_DIR/runtime.conf"
  mv "$RUN_DIR/pg_hba.conf.new" "$RUN_DIR/pg_hba.conf"
}
SERVER_OPTS=(-c "config_file=$RUN_DIR/runtime.conf" -c "hba_file=$RUN_DIR/pg_hba.conf" -c "cluster_name=$ME")

# initdb, on the operator's instruction only (a new database, or a major upgrade's new server).
initialise() {
  writable_volume
  local new="$PGDATA.new"
  rm -rf "$new"
  log "initialising a new database"
  run initdb -D "$new" --username="$POSTGRES_USER" --pwfile=<(printf '%s\n' "$POSTGRES_PASSWORD") --auth=scram-sha-256 ||
    { log "initdb failed"; return 1; }
  # The replication role, with the server reachable only on its socket (not Ready meanwhile: the probes use TCP). Its
  # password reaches psql from the environment (\getenv), never a command line, and the statement is not logged.
  run pg_ctl -D "$new" -w -o "-c config_file=$CONF/postgresql.conf -c hba_file=$CONF/pg_hba.conf -c listen_addresses='' -c synchronous_standby_names=''" start ||
    { log "the new database did not start"; return 1; }
  if ! PGPASSWORD="$POSTGRES_PASSWORD" run psql -X -w -q -v ON_ERROR_STOP=1 -U "$POSTGRES_USER" -d postgres \
      -v user="$REPLICATION_USER" <<'SQL'
\getenv pass REPLICATION_PASSWORD
SET log_statement = 'none';
SET log_min_duration_statement = -1;
SET log_min_error_statement = panic;
SELECT format('CREATE ROLE %I WITH REPLICATION LOGIN PASSWORD %L', :'user', :'pass') \gexec
SQL
  then
    run pg_ctl -D "$new" -w -m immediate stop || true
    log "the replication role could not be created"
    return 1
  fi
  run pg_ctl -D "$new" -w -m fast stop || return 1
  if [ -e "$PGDATA" ]; then keep_aside incomplete "there is no PG_VERSION in it" || return 1; fi
  mv "$new" "$PGDATA"
}

# Recovery from another database's archive (spec.restoreFrom.objectStore, recovery.env), on the operator's instruction
# only: a completed base backup restored beside PGDATA, the archived WAL replayed up to the target and promoted on a new
# timeline by a server that only this script reaches (a socket directory of its own, no TCP: so it may trust the
# socket), this database's passwords set (the backup holds the source's), then renamed into place. The WAL it writes
# waits for this database's own archiver. In a subshell: the source's keys never reach the server started afterwards.
# A failure ends the container with its reason as the termination message (status shows it; the restart backs off).
RECOVERING="$RUN_DIR/sampledb-recovering"  # (the startup probe passes while it is there: a recovery takes its time)
recover() (
  writable_volume
  local new="$PGDATA.new" boot="$RUN_DIR/recovery" why
  recovery_failed() {
    why=$(redacted "${1:-${2:-}}")
    log "recovery failed: $why"
    printf 'recovery from %s failed: %s\n' "${SAMPLEDB_S3_URL:-the archive}" "$why" >/dev/termination-log 2>/dev/null || true
    [ -z "$replay_pid" ] || ! kill -0 "$replay_pid" 2>/dev/null || pg_ctl -D "$new" -w -m immediate stop >/dev/null 2>&1
    rm -f "$RECOVERING"
    exit 1
  }
  . "$CONF/objectstore.sh"
  . "$CONF/replay.sh"
  objectstore_settings "$CONF/recovery.env" || recovery_failed "no recovery settings ($CONF/recovery.env): see the SampleDB's status"
  objectstore_keys || recovery_failed "the source archive's keys are not readable in $SAMPLEDB_S3_KEYS: see spec.restoreFrom.objectStore.credentials"
  : >"$RECOVERING"
  replay_archive "$new" "$boot" "$PGDATA.recovery.log" "$ME-recovery"
  log "recovered: $(psql -X -w -A -t -q -h "$boot" -U "$POSTGRES_USER" -d postgres -c "select 'timeline ' || timeline_id || ' at ' || pg_current_wal_lsn() from pg_control_checkpoint()")"
  if ! psql -X -w -q -v ON_ERROR_STOP=1 -h "$boot" -U "$POSTGRES_USER" -d postgres \
      -v super="$POSTGRES_USER" -v user="$REPLICATION_USER" <<'SQL'
SET log_statement = 'none';
SET log_min_duration_statement = -1;
SET log_min_error_statement = panic;
SET password_encryption = 'scram-sha-256';
\getenv super_pass POSTGRES_PASSWORD
\getenv pass REPLICATION_PASSWORD
SELECT format('ALTER ROLE %I WITH SUPERUSER LOGIN PASSWORD %L', :'super', :'super_pass') \gexec
SELECT format('CREATE ROLE %I', :'user') WHERE NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = :'user') \gexec
SELECT format('ALTER ROLE %I WITH REPLICATION LOGIN PASSWORD %L', :'user', :'pass') \gexec
CHECKPOINT;
SQL
  then
    recovery_failed "this database's passwords could not be set (the superuser $POSTGRES_USER must exist in the source)"
  fi
  pg_ctl -D "$new" -w -m fast stop >/dev/null || recovery_failed "the recovered server did not stop"
  rm -rf "$boot" "$PGDATA.recovery.log" "$new/recovery.signal"
  if [ -e "$PGDATA" ]; then keep_aside incomplete "there is no PG_VERSION in it" || exit 1; fi
  mv "$new" "$PGDATA"
  rm -f "$RECOVERING"
)

# A new replica: a copy of the primary, built beside PGDATA and renamed when complete (an interrupted clone is never
# taken for data).
clone() {
  primary_ready || { wait_note "waiting for the primary at $PRIMARY_HOST:$PRIMARY_PORT to clone it"; return 1; }
  writable_volume
  local new="$PGDATA.new"
  rm -rf "$new"
  log "cloning the primary at $PRIMARY_HOST:$PRIMARY_PORT"
  if ! run pg_basebackup -h "$PRIMARY_HOST" -p "$PRIMARY_PORT" -U "$REPLICATION_USER" -w -D "$new" -X stream --checkpoint=fast; then
    rm -rf "$new"
    wait_note "the clone of $PRIMARY_HOST:$PRIMARY_PORT failed; trying again"
    return 1
  fi
  : >"$new/standby.signal"
  if [ -e "$PGDATA" ]; then keep_aside incomplete "there is no PG_VERSION in it" || return 1; fi
  mv "$new" "$PGDATA"
}

# A former primary, now a replica: rewound to the new primary's history (only what it wrote after the two diverged is
# undone; after a clean switchover there is nothing to undo), else kept aside and cloned.
rejoin() {
  primary_ready || { wait_note "waiting for the primary at $PRIMARY_HOST:$PRIMARY_PORT to rejoin it"; return 1; }
  # pg_rewind takes the source's timeline from its control file, which a server promoted moments ago updates only at
  # its next checkpoint: without one, it rewinds to the old timeline and the replica never starts. And the primary's
  # Service may still reach a replica about to be promoted: a source in recovery is waited out.
  if ! PGCONNECT_TIMEOUT=10 PGOPTIONS="-c statement_timeout=0" run timeout 300 psql -X -w -q -v ON_ERROR_STOP=1 \
      -h "$PRIMARY_HOST" -p "$PRIMARY_PORT" -U "$POSTGRES_USER" -d postgres >/dev/null 2>&1 <<'SQL'
DO $$ BEGIN IF pg_is_in_recovery() THEN RAISE EXCEPTION 'not promoted yet'; END IF; END $$;
SELECT (SELECT timeline_id FROM pg_control_checkpoint())
       <> ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::int AS stale \gset
\if :stale
CHECKPOINT;
\endif
SQL
  then
    wait_note "waiting for the new primary at $PRIMARY_HOST:$PRIMARY_PORT to be promoted and to take the checkpoint pg_rewind needs"
    return 1
  fi
  log "this server was a primary and is now a replica: rewinding it to the new primary (pg_rewind)"
  # (a server that crashed is first recovered by pg_rewind itself: with the servers' configuration, wal_log_hints on,
  # not the data directory's default, which pg_rewind would then refuse)
  if run pg_rewind --target-pgdata="$PGDATA" --progress --config-file="$CONF/postgresql.conf" \
      --source-server="host=$PRIMARY_HOST port=$PRIMARY_PORT user=$POSTGRES_USER dbname=postgres connect_timeout=10"; then
    : >"$PGDATA/standby.signal"
    history rewound
    log "rewound: it follows the new primary"
  else
    keep_aside former-primary "pg_rewind failed (its data may have diverged)" || return 1
  fi
}

# Whether the data in PGDATA may be started as this server's label says; sets start_as. Returns 1 to wait and look
# again (every decision is taken anew: the label or the annotations may change meanwhile).
prepare() {
  local r from
  read_role r
  [ -n "$r" ] || { wait_note "waiting for the operator's sampledb.example.com/role label"; return 1; }
  if [ -s "$PGDATA/PG_VERSION" ] && [ "$(cat "$PGDATA/PG_VERSION")" != "$(major)" ]; then
    from=$(cat "$PGDATA/PG_VERSION")
    if [ "$(annotation upgrade-from)" = "$from" ]; then
      keep_aside "v$from" "a major upgrade from PostgreSQL $from to $(major)" || return 1
    elif [ "$(annotation upgrade-rollback)" = "$(major)" ] && [ -s "$PGDATA.v$(major)/PG_VERSION" ]; then
      keep_aside "failed-v$from" "the upgrade to PostgreSQL $from is rolled back" || return 1
      log "taking back the PostgreSQL $(major) data kept aside before the upgrade"
      mv "$PGDATA.v$(major)" "$PGDATA" || return 1
    else
      wait_note "the data in $PGDATA is PostgreSQL $from and this server is PostgreSQL $(major), and no upgrade from $from is under way: not starting (set spec.version back to the version of the data)"
      return 1
    fi
  fi
  if [ -f "$PGDATA.reclone" ]; then
    if [ -e "$PGDATA" ]; then keep_aside stale "this replica fell behind what the primary keeps" || return 1; fi
    rm -f "$PGDATA.reclone"
  fi
  if [ -s "$PGDATA/PG_VERSION" ] && [ "$r" = replica ] && [ ! -f "$PGDATA/standby.signal" ]; then
    rejoin || return 1
  fi
  if [ ! -s "$PGDATA/PG_VERSION" ]; then
    if [ "$r" = primary ]; then
      if [ "$(annotation bootstrap)" = recovery ] && [ -z "$(annotation upgrade-from)" ]; then
        run recover || exit 1
      elif [ "$(annotation bootstrap)" = initdb ] || [ -n "$(annotation upgrade-from)" ]; then
        initialise
      else
        wait_note "the data volume holds no database and the operator has not asked for a new one: this server does not start as an empty primary (the operator promotes a server that has the data; this one then clones it)"
        return 1
      fi
    else
      clone || return 1
    fi
  fi
  if [ "$r" = primary ] && ! term_holds; then
    wait_note "waiting for the Lease to name this server (read by its Lease agent within ${LEASE_TERM_SECONDS}s) before it starts as the primary: $(lease_news)"
    return 1
  fi
  start_as=$r
  return 0
}

# Under the lock: the label still says what prepare() saw. A replica starts as a standby (it takes no writes, and the
# fence's mark says so); a primary's mark goes before its server starts.
may_start() {
  local r
  read_role r
  [ "$r" = "$start_as" ] || return 1
  if [ "$start_as" = replica ]; then
    [ -f "$PGDATA/standby.signal" ] || return 1
    : >"$FENCED"
  else
    rm -f "$FENCED"
  fi
}

locked mark_if_replica
start_as=""
while :; do
  # (no server runs while it waits: once labelled replica it says so at once, and a failover need not wait it out)
  until prepare; do locked mark_if_replica; run sleep 1; done
  locked may_start && break
done
waiting=""

# (written by pg_basebackup -R or earlier versions of this script, with the password: the command line has it now)
sed -i '/^primary_conninfo\b/d; /^primary_slot_name\b/d' "$PGDATA/postgresql.auto.conf" 2>/dev/null || true
write_runtime || true
opts=("${SERVER_OPTS[@]}")
if [ "$start_as" = replica ]; then
  # tcp_user_timeout: right after a change of primary the Service may send the first attempt to the pod that just went,
  # and a SYN to an address that is gone waits for TCP's own give-up (30-70 s, while a synchronous primary acknowledges
  # nothing); the walreceiver connects asynchronously, so libpq's connect_timeout does not apply.
  opts+=(-c "primary_conninfo=host=$PRIMARY_HOST port=$PRIMARY_PORT user=$REPLICATION_USER application_name=$ME tcp_user_timeout=${REPLICA_TCP_USER_TIMEOUT_MS:-3000}")
  [[ ",$(annotation servers)," != *",$ME,"* ]] || opts+=(-c "primary_slot_name=$(slot_of "$ME")")
else
  history writable
fi
log "starting as $start_as"
# A server killed in an earlier start of this container left its socket's lock file in the (kept) socket directory;
# the new server refuses it when its pid names a live process here, as it may after a restart. None runs here now.
rm -f "${PGHOST:-/var/run/postgresql}"/.s.PGSQL.*.lock
rm -f "$STARTING" "$STOPPING_MARK"
printf -v launched '%(%s)T' -1
postgres -D "$PGDATA" "${opts[@]}" {NAP_FD}<&- &
server=$!
# (a SIGTERM that came after the last step and before the server's pid was known stops it now)
[ "$stopping" = 0 ] || kill -INT "$server" 2>/dev/null || true

# The term's watchdog, a process of its own so that nothing this script waits for (a slow query) delays it: once no
# read of the Lease sent less than a term ago names this server while it runs as a primary, it stops the server (fast
# shutdown: no more writes) and tells this script, which then acts as for its replica label.
# A server that has not stopped FENCE_STOP_SECONDS later (hung) is ended with every other process of the container
# but this script (kill -1), even when this script is held up too: a primary ends within its term and that.
on_term_lost() {
  [ "$stopping" = 0 ] || return 0
  log "no read of the Lease has named this server for ${LEASE_TERM_SECONDS}s ($(lease_news)): stopping, so that another server can be promoted safely; it starts again once the Lease names it"
  fencing=1 termed=1
  on_stop
}
running() {  # (a server that has exited stays a zombie until this script, perhaps held up, waits for it)
  local stat=""  # (builtins: the watchdog's deadline must not wait for a process to start)
  { IFS= read -r stat <"/proc/$1/stat"; } 2>/dev/null || return 1
  stat=${stat##*) }  # (the state follows the command's name, which may hold ") " itself)
  [ -n "$stat" ] && [ "${stat:0:1}" != Z ]
}
watchdog=""
if [ -n "${LEASE_TERM_SECONDS:-}" ]; then
  trap on_term_lost USR1
  (
    set +e  # (a failed step must not end it)
    trap - TERM INT USR1
    while kill -0 "$server" 2>/dev/null; do
      # (the standby's file first: a replica's term check would read its annotations five times a second)
      if [ ! -f "$PGDATA/standby.signal" ] && ! term_holds; then
        # (this script is told first: told after, it could see the server gone before the signal and end the
        # container as for a crash; either is a signal sent at once, which nothing can hold up)
        kill -USR1 $$ 2>/dev/null || true
        : >"$STOPPING_MARK" 2>/dev/null || true
        kill -INT "$server" 2>/dev/null || true
        # (by the clock, not by counting naps: the operator promotes another server, without a word from this node,
        # once the term and this stop time have passed)
        read -r now _ </proc/uptime
        until_kill=$((10#${now/./} + ${FENCE_STOP_SECONDS:-10} * 100))
        while :; do
          running "$server" || exit 0
          read -r now _ </proc/uptime
          ((10#${now/./} < until_kill)) || break
          nap 0.2
        done
        kill -KILL -1 2>/dev/null || true  # (first: a log write may wait on a stalled pipe)
        log "the server did not stop within ${FENCE_STOP_SECONDS:-10}s of the end of its term: every process of the container but its first was ended"
      fi
      nap 0.2
    done
  ) </dev/null &
  watchdog=$!
fi

check_sql() {  # (short timeouts: the loop that follows the label waits for these)
  PGCONNECT_TIMEOUT=3 PGOPTIONS="-c statement_timeout=3000" psql -X -w -A -t -q -U "$POSTGRES_USER" -d postgres "$@" 2>/dev/null
}
# Whether this replica can still catch up: it is not streaming, and the primary no longer has the WAL segment of the
# position it must go on from (the primary compares the segment numbers; the timelines may differ). Any error (the
# primary is down, a server is starting) counts as "it can".
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
# On the primary: a replication slot for each other server, none for servers that are gone (or slots that lost their
# WAL: max_slot_wal_keep_size), so a replica that was down catches up from where it was.
slots_kept=""  # the servers annotation keep_slots last acted on
keep_slots() {
  local servers wanted="" s
  read_annotation servers servers
  [ -n "$servers" ] || { slots_kept=""; return 0; }
  for s in ${servers//,/ }; do [ "$s" = "$ME" ] || wanted+="${wanted:+,}$(slot_of "$s")"; done
  # (remembered only once done: a failure is tried again the next second)
  check_sql -v ON_ERROR_STOP=1 -v wanted="{$wanted}" >/dev/null <<'SQL' && slots_kept=$servers || true
select pg_drop_replication_slot(slot_name) from pg_replication_slots
 where slot_type = 'physical' and slot_name like 'sdb\_%' and not active
   and (not slot_name = any (:'wanted'::text[]) or wal_status = 'lost');
select pg_create_physical_replication_slot(s, true) from unnest(:'wanted'::text[]) s
 where not exists (select from pg_replication_slots where slot_name = s);
SQL
}
# SIGHUP to the server this script started, once its postmaster.pid names it and its start (written after its signal
# handlers are in place: before, SIGHUP would end it; a file left by a killed server may name the same pid); a reload
# that could not be sent is sent again the next second.
reload_due=0
reload() {
  local pid="" dir="" started=""
  { read -r pid; read -r dir; read -r started; } 2>/dev/null <"$PGDATA/postmaster.pid" || true
  if [ -n "$server" ] && [ "$pid" = "$server" ] && [[ "$started" =~ ^[0-9]+$ ]] && ((started >= launched)) &&
      kill -HUP "$server" 2>/dev/null; then
    reload_due=0
  else
    reload_due=1
  fi
}
# The fence follows its annotation: the clients are kept out (pg_hba.conf) and disconnected, and only then does the
# server say so (sampledb.fence, which the Jobs that need the fence wait for).
follow_annotations() {
  local fence before
  read_annotation fence fence
  if [ -n "$fence" ] && [ "$fence_swept" != "$fence" ]; then
    before=$(check_sql -c "select pg_conf_load_time()") || return 0
    write_runtime || true
    reload
    [ "$reload_due" = 0 ] || return 0
    # (the clients are ended only once the server has loaded the fenced pg_hba.conf; else again the next second)
    for ((i = 0; ; i++)); do
      [ "$(check_sql -v before="$before" <<<"select pg_conf_load_time() > :'before'::timestamptz")" = t ] && break
      ((i < 25)) || return 0
      nap 0.2
    done
    check_sql -v su="$POSTGRES_USER" >/dev/null <<'SQL' || return 0
select count(pg_terminate_backend(pid)) from pg_stat_activity
 where backend_type = 'client backend' and usename <> :'su' and pid <> pg_backend_pid()
SQL
    fence_swept=$fence
    log "fenced ($fence): only the superuser and the replicas connect; every other session was ended"
  elif [ -z "$fence" ] && [ -n "$fence_swept" ]; then
    fence_swept=""
    log "the fence is lifted"
  fi
  if write_runtime || [ "$reload_due" = 1 ]; then reload; fi
}
conf_files conf_was
loops=0 behind_checks=0

# Follow the label and the annotations while the server runs.
while [ "$stopping" = 0 ] && kill -0 "$server" 2>/dev/null; do
  if [ -n "$watchdog" ] && ! kill -0 "$watchdog" 2>/dev/null && [ ! -f "$PGDATA/standby.signal" ]; then
    log "the term's watchdog has ended"
    on_term_lost
    continue
  fi
  read_role labelled
  if [ "$labelled" = primary ] && [ -f "$PGDATA/standby.signal" ] && term_holds && locked unfence_if_primary; then
    # promoted while a fence is asked for (a major upgrade moving its primary): no client writes before the fence
    read_annotation fence fence
    [ -z "$fence" ] || follow_annotations
    log "relabelled primary: promoting"
    history writable
    pg_ctl -D "$PGDATA" -w promote &
    wait $! || [ "$stopping" = 1 ] || log "the promotion did not complete; trying again"
    keep_slots
  elif [ "$labelled" = replica ] && [ ! -f "$PGDATA/standby.signal" ]; then
    log "relabelled replica while running as a primary: stopping (it rejoins as a replica of the new primary)"
    fencing=1
    on_stop
  elif ((++loops % 5 == 0)); then
    if [ "$labelled" = primary ] && [ -f "$PGDATA/standby.signal" ]; then
      wait_note "labelled primary: waiting for the Lease to name this server before promoting it ($(lease_news))"
    fi
    # (each second: the annotations, the configuration files, the slots; each tenth second, whether a replica fell behind)
    follow_annotations
    conf_files conf_now
    if [ "$conf_now" != "$conf_was" ]; then
      conf_was=$conf_now
      log "the configuration changed: reloading it"
      write_runtime || true
      reload
    fi
    if [ ! -f "$PGDATA/standby.signal" ]; then
      # (at once when the servers change; else each tenth second, for slots that lost their WAL: a connection costs)
      read_annotation servers servers
      if [ "$servers" != "$slots_kept" ] || ((loops % 50 == 0)); then keep_slots; fi
    elif ((loops % ${BEHIND_CHECK_LOOPS:-50} == 0)); then
      if fell_behind; then behind_checks=$((behind_checks + 1)); else behind_checks=0; fi
      if ((behind_checks >= ${BEHIND_CHECKS:-3})); then
        log "the primary no longer has the WAL this replica needs to catch up: stopping (it starts again and clones the primary afresh)"
        touch "$PGDATA.reclone"
        on_stop
      elif compgen -G "$PGDATA.*" >/dev/null &&
          [ "$(check_sql -c "select exists (select from pg_stat_wal_receiver where status = 'streaming')")" = t ]; then
        for old in "$PGDATA".former-primary* "$PGDATA".stale* "$PGDATA".incomplete* "$PGDATA".failed-v*; do
          [ -e "$old" ] || continue
          log "streaming again: removing $old"
          rm -rf "$old"
        done
      fi
    fi
  fi
  # (a change of label is part of a switchover's write downtime: look often; it costs a read of the label's file)
  nap 0.2
done
# A server told to stop (for its replica label within FENCE_STOP_SECONDS; by SIGTERM within STOP_SECONDS, before the
# kubelet's SIGKILL) that has not stopped (hung, or frozen) is ended with the container: when PID 1 exits, the kernel
# kills every process of the container, the server's included, and the history says when. The kubelet then shows
# the container stopped, and the restarted container starts as its label says.
# (counted in naps of 0.2 s: $SECONDS counts whole seconds, so a deadline from it comes up to a second early)
naps=0
if [ "$fencing" = 1 ]; then limit=${FENCE_STOP_SECONDS:-10} why="of its replica label"; else limit=${STOP_SECONDS:-55} why="of SIGTERM"; fi
while [ "$stopping" = 1 ] && kill -0 "$server" 2>/dev/null; do
  if ((naps++ >= limit * 5)); then
    log "the server did not stop within ${limit}s $why: ending the container, and every process in it"
    history stopped
    exit 137
  fi
  nap 0.2
done
rc=0
while :; do
  if wait "$server"; then rc=0; else rc=$?; fi
  kill -0 "$server" 2>/dev/null || break
done
history stopped
log "the server exited with status $rc"
if [ "$fencing" = 1 ]; then
  # the mark holds where this server stopped: the promoted replica must have received it (its shutdown checkpoint)
  # (written beside it and renamed: fenced.sh, polling, must never read it half written)
  { LC_ALL=C pg_controldata -D "$PGDATA" 2>/dev/null | sed -n 's/^Latest checkpoint location: *//p' || :; } >"$FENCED.new"
  mv -f "$FENCED.new" "$FENCED"
  # (the operator's fenced.sh, started by exec as the label changed, reads it in this container, which goes on)
fi
# A server stopped on purpose (its replica label, its term, a fall behind) starts again as its label says in this
# container, not a restarted one: each restart lengthens the kubelet's back-off (up to 5 minutes) before the next.
if [ "$stopping" = 1 ] && [ "$terminated" = 0 ]; then
  if [ "$termed" = 1 ]; then
    log "waiting in this container for the Lease to name this server again"
  else
    log "starting again in this container, as its label says"
  fi
  exec {NAP_FD}<&-
  exec /bin/bash "${BASH_SOURCE[0]}" "$@"
fi
exit "$rc"
