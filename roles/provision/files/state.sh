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
lsn_of() { printf '%X/%X\n' $(($1 >> 32)) $(($1 & 0xFFFFFFFF)); }  # and back
control=""  # pg_controldata's report, when read
field() { printf '%s\n' "$control" | sed -n "s/^$1: *//p"; }
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
# How far the WAL in a standby's pg_wal goes, as "<timeline> <lsn>" (nothing when it cannot be read): from its last
# restartpoint (pg_control) on that timeline to the end of the last valid record, then on the newer timeline its
# history files say forked from there at or before that end. Only pg_waldump's own numbers are read, never a record's
# description (a client can write any text into WAL), and a position is taken only once pg_waldump reads a record
# there. Each scan is bounded: a standby's answer must not hold the operator's choice.
waldump() { LC_ALL=C timeout -k 2 "${WALDUMP_SECONDS:-15}" pg_waldump -p "$PGDATA/pg_wal" "$@"; }
record_end() {  # record_end LSN TOTAL: where the next record begins (past the page headers a long record spans)
  local pos left=$2 room header
  pos=$(num "$1")
  room=$((block - pos % block))
  while ((left > room)); do
    left=$((left - room)) pos=$((pos + room))
    header=$((pos % seg == 0 ? 40 : 24))  # (a segment's first page has the long header)
    pos=$((pos + header)) room=$((block - header))
  done
  lsn_of $(((pos + left + 7) & ~7))  # (records begin 8-byte aligned)
}
wal_end() {
  local tli start block seg out at missing line tot end fork history next n parent switch last_parent last_switch
  local found=""
  tli=$(field "Latest checkpoint's TimeLineID") start=$(field "Latest checkpoint's REDO location")
  block=$(field 'WAL block size') seg=$(field 'Bytes per WAL segment')  # (record_end reads them too)
  [[ "$tli" =~ ^[0-9]+$ && "$start" =~ ^[0-9A-F]+/[0-9A-F]+$ && "$block" =~ ^[1-9][0-9]*$ && "$seg" =~ ^[1-9][0-9]*$ ]] ||
    return 0
  while :; do
    # It reads on until the first record that is not valid, and names the last one that was; or, when the WAL ends
    # with a segment's end, until it misses the next segment: then the last record it read before that one's start.
    out=$(waldump -q -t "$tli" -s "$start" 2>&1)
    at=$(sed -n 's|^pg_waldump: error: error in WAL record at \([0-9A-F]*/[0-9A-F]*\): .*|\1|p' <<<"$out" | head -n 1)
    missing=$(sed -n 's|^pg_waldump: error: could not find file "\([0-9A-F]\{24\}\)".*|\1|p' <<<"$out" | head -n 1)
    if [ -z "$at" ] && [ -n "$missing" ]; then
      n=$(( (16#${missing:8:8} << 32) + 16#${missing:16:8} * seg ))  # (the missing segment's first byte)
      at=$(waldump -t "$tli" -s "$start" -e "$(lsn_of "$n")" 2>/dev/null |
        sed -n 's|^rmgr: [A-Za-z0-9_]* *len (rec/tot): *[0-9]*/ *[0-9]*, tx: *[0-9]*, lsn: \([0-9A-F]*/[0-9A-F]*\), prev .*|\1|p' |
        tail -n 1)
    fi
    [ -n "$at" ] || break
    # (checked: pg_waldump reads a record that begins there, whatever a description printed above said)
    line=$(waldump -t "$tli" -s "$at" -n 1 2>/dev/null | head -n 1)
    [[ "$line" =~ ^rmgr:\ [^\ ]+\ +len\ \(rec/tot\):\ +[0-9]+/\ *([0-9]+),\ tx:\ +[0-9]+,\ lsn:\ ([0-9A-F]+/[0-9A-F]+),\ prev\  ]] &&
      (( $(num "${BASH_REMATCH[2]}") == $(num "$at") )) || break  # (one prints it zero-padded, the other not)
    tot=${BASH_REMATCH[1]}
    end=$(record_end "$at" "$tot") || break
    # (a segment switch's record fills its segment: the WAL goes on at the next one, as a standby's position does)
    # (the whole line: a switch record is 24 bytes and says nothing more; a restore point's name could say SWITCH)
    if [[ "$line" =~ ^rmgr:\ XLOG\ +len\ \(rec/tot\):\ +24/\ +24,\ tx:\ +0,\ lsn:\ [0-9A-F]+/[0-9A-F]+,\ prev\ [0-9A-F]+/[0-9A-F]+,\ desc:\ SWITCH\ *$ ]]; then
      end=$(lsn_of $(( ($(num "$at") / seg + 1) * seg )))
    fi
    found="$tli $end"
    # the newer timeline that forked from this one (its history's last line names this one) at or before that end,
    # and whose WAL is here
    next="" fork=""
    for history in "$PGDATA"/pg_wal/*.history; do
      n=${history##*/}; n=${n%.history}
      [[ "$n" =~ ^[0-9A-F]{8}$ ]] && (( 16#$n > tli )) || continue
      last_parent="" last_switch=""
      while read -r parent switch _; do
        [[ "$parent" =~ ^[0-9]+$ && "$switch" =~ ^[0-9A-F]+/[0-9A-F]+$ ]] && last_parent=$parent last_switch=$switch
      done <"$history"
      [ "$last_parent" = "$tli" ] && (( $(num "$last_switch") <= $(num "$end") )) &&
        compgen -G "$PGDATA/pg_wal/$n[0-9A-F]*" >/dev/null || continue
      if [ -z "$next" ] || (( 16#$n > next )); then next=$((16#$n)) fork=$last_switch; fi
    done
    [ -n "$next" ] || break
    tli=$next start=$fork
  done
  [ -z "$found" ] || printf '%s\n' "$found"
}
later() {  # later TIMELINE LSN: whether that is further than what is known (the timeline first, then the position)
  local num_new num_old
  [[ "$2" == */* ]] || return 1
  [[ "$lsn" == */* ]] || return 0
  num_new=$(num "$2") num_old=$(num "$lsn")
  (( ${1:-0} > ${timeline:-0} || (${1:-0} == ${timeline:-0} && num_new > num_old) ))
}
# (a standby's only: a former primary's WAL past its rewind, or a rewind cut short, must not count)
if [ "$standby" = yes ] && { [ "$running" = no ] || { [ "$recovery" = yes ] && [ "$streaming" = no ]; }; }; then
  control=${control:-$(LC_ALL=C pg_controldata -D "$PGDATA" 2>/dev/null || true)}
  read -r disk_timeline disk_lsn < <(wal_end) || true
  if later "${disk_timeline:-}" "${disk_lsn:-}"; then timeline=$disk_timeline lsn=$disk_lsn; fi
fi
fenced=no
locked fenced_now && fenced=yes
echo "role=$(role) data=$data standby=$standby running=$running recovery=$recovery streaming=$streaming sysid=$sysid timeline=$timeline lsn=$lsn fenced=$fenced"
