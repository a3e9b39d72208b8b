#!/bin/bash
# state.sh: run by the operator in a server container (exec) to learn what this server holds, whether its server runs or
# not (the container may be waiting for its label, or for a primary to clone): one line of key=value pairs
#   role       its label (primary, replica, or empty)
#   data       yes when its volume holds a database, no when it is empty
#   standby    yes when that database is a standby's (it follows a primary), no when it is a primary's
#   running    yes when its server answers on its socket
#   recovery   yes when that server replays WAL (a standby), no when it takes writes
#   streaming  yes when that standby streams from a primary
#   sysid      the database's system identifier (the same on every server of one database)
#   timeline   its WAL timeline
#   lsn        how far its WAL goes: written (a primary), received or replayed (a standby); for a server not running,
#              or a standby not streaming yet, also how far the WAL on its volume goes (a killed standby's pg_control
#              records only its last restartpoint, and it may hold the only copy of acknowledged commits)
#   fenced     yes when the fence's mark is there and the label says replica (role.sh)
set -uo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/role.sh"
: "${PGDATA:?}"
sql() { PGPASSWORD="$POSTGRES_PASSWORD" PGCONNECT_TIMEOUT=3 PGOPTIONS="-c statement_timeout=3000" \
  psql -X -w -A -t -q -F ' ' -U "${POSTGRES_USER:-postgres}" -d postgres "$@" 2>/dev/null; }
num() { local hi=${1%/*} lo=${1#*/}; echo $(( (16#$hi << 32) | 16#$lo )); }  # a WAL position as a number
data=no standby=no running=no recovery="" streaming=no sysid="" timeline="" lsn=""
[ -s "$PGDATA/PG_VERSION" ] && data=yes
[ -f "$PGDATA/standby.signal" ] && standby=yes
if row=$(sql -c "select (select system_identifier from pg_control_system()), pg_is_in_recovery(),
    case when pg_is_in_recovery() then greatest(pg_last_wal_receive_lsn(), pg_last_wal_replay_lsn())
         else pg_current_wal_lsn() end,
    case when pg_is_in_recovery() then coalesce((select received_tli from pg_stat_wal_receiver),
                                                (select timeline_id from pg_control_checkpoint()))
         else ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::int end,
    exists (select from pg_stat_wal_receiver where status = 'streaming')") && [ -n "$row" ]; then
  read -r sysid inrec lsn timeline stream <<<"$row"
  running=yes
  recovery=$([ "$inrec" = t ] && echo yes || echo no)
  streaming=$([ "$stream" = t ] && echo yes || echo no)
elif [ "$data" = yes ]; then
  control=$(LC_ALL=C pg_controldata -D "$PGDATA" 2>/dev/null || true)
  field() { printf '%s\n' "$control" | sed -n "s/^$1: *//p"; }
  sysid=$(field 'Database system identifier')
  timeline=$(field "Latest checkpoint's TimeLineID")
  checkpoint=$(field 'Latest checkpoint location')
  recovered=$(field 'Minimum recovery ending location')
  lsn=$checkpoint
  # (the larger of the two WAL positions, compared as numbers)
  if [ -n "$recovered" ] && [ "$recovered" != 0/0 ] && [ -n "$checkpoint" ]; then
    (( $(num "$recovered") > $(num "$checkpoint") )) && lsn=$recovered
  fi
fi
# The end of the last valid record in pg_wal, as "<timeline> <lsn>" (nothing when none is found): the newest segment
# that holds a valid record, read to its end and on. (Segments named past the end are recycled ones: no valid record.)
wal_end() {
  local seg last end
  for seg in $(ls -r "$PGDATA/pg_wal" 2>/dev/null | grep -E '^[0-9A-F]{24}$' | head -n 32); do
    last=$(pg_waldump -p "$PGDATA/pg_wal" "$seg" 2>/dev/null | tail -n 1)
    [[ "$last" =~ len\ \(rec/tot\):\ *[0-9]+/\ *([0-9]+),.*\ lsn:\ ([0-9A-F]+)/([0-9A-F]+), ]] || continue
    # (the next record begins at the end of this one, aligned to 8 bytes: where a streaming standby's position is)
    end=$(( ((16#${BASH_REMATCH[2]} << 32 | 16#${BASH_REMATCH[3]}) + BASH_REMATCH[1] + 7) & ~7 ))
    printf '%d %X/%X\n' "$((16#${seg:0:8}))" $((end >> 32)) $((end & 0xFFFFFFFF))
    return 0
  done
}
later() {  # later TIMELINE LSN: whether that is further than what is known (the timeline first, then the position)
  local num_new num_old
  [[ "$2" == */* ]] || return 1
  [[ "$lsn" == */* ]] || return 0
  num_new=$(num "$2") num_old=$(num "$lsn")
  (( ${1:-0} > ${timeline:-0} || (${1:-0} == ${timeline:-0} && num_new > num_old) ))
}
if [ "$data" = yes ] && { [ "$running" = no ] || { [ "$recovery" = yes ] && [ "$streaming" = no ]; }; }; then
  read -r disk_timeline disk_lsn < <(wal_end) || true
  if later "${disk_timeline:-}" "${disk_lsn:-}"; then timeline=$disk_timeline lsn=$disk_lsn; fi
fi
fenced=no
locked fenced_now && fenced=yes
echo "role=$(role) data=$data standby=$standby running=$running recovery=$recovery streaming=$streaming sysid=$sysid timeline=$timeline lsn=$lsn fenced=$fenced"
