#!/bin/bash
# Major version migration by dump and restore.
#   migrate.sh dump FILE     - with the NEW major's pg_dumpall, dump the running (old) server to FILE
#   migrate.sh restore FILE  - initdb a fresh data directory with the new major and load FILE into it
set -euo pipefail
cmd=${1:?dump or restore}; file=${2:?file}
case "$cmd" in
  dump)
    until pg_isready -q; do sleep 1; done
    mkdir -p "$(dirname "$file")"
    pg_dumpall | gzip -c > "$file.partial"
    gzip -t "$file.partial" && mv "$file.partial" "$file"
    echo "migration dump $file: $(stat -c %s "$file") bytes"
    ;;
  restore)
    : "${PGDATA:?}" "${POSTGRES_USER:=postgres}"
    initdb --username="$POSTGRES_USER" --pwfile=<(printf '%s' "${POSTGRES_PASSWORD:?}") --auth=scram-sha-256 -D "$PGDATA"
    pg_ctl -D "$PGDATA" -w -o "-c listen_addresses='' -c unix_socket_directories=${SOCKET_DIR:-/tmp}" start
    # -w: never prompt (a prompt would hang a Job); the superuser's password authenticates the socket.
    gunzip -c "$file" | PGPASSWORD="$POSTGRES_PASSWORD" psql -X -w -q -h "${SOCKET_DIR:-/tmp}" -U "$POSTGRES_USER" \
      -d postgres >/dev/null
    pg_ctl -D "$PGDATA" -w stop
    echo "migrated $file into $(cat "$PGDATA/PG_VERSION")"
    ;;
  *) echo "usage: migrate.sh dump|restore FILE" >&2; exit 2 ;;
esac
