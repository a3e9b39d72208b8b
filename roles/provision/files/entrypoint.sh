#!/bin/bash
# Runs one SampleDB server. Whether it is the primary or a streaming replica comes from its own pod label
# sampledb.example.com/role (the operator's leader role sets it; /etc/podinfo/labels is a downward API
# volume, refreshed while the pod runs). A replica relabelled "primary" promotes itself.
set -euo pipefail
: "${PGDATA:?}" "${POSTGRES_USER:=postgres}" "${PRIMARY_HOST:?}"
LABELS=${LABELS_FILE:-/etc/podinfo/labels}
CONF=${CONF_DIR:-/etc/sampledb}

role() { sed -n 's/^sampledb.example.com\/role="\(.*\)"$/\1/p' "$LABELS" 2>/dev/null || true; }

# Wait (up to 5 minutes) for the operator to say what this server is.
for _ in $(seq 300); do [ -n "$(role)" ] && break; sleep 1; done
[ -n "$(role)" ] || { echo "no sampledb.example.com/role label after 5 minutes" >&2; exit 1; }

major() { postgres --version | sed -E 's/.* ([0-9]+)(\.[0-9]+)?.*/\1/'; }

if [ -s "$PGDATA/PG_VERSION" ] && [ "$(cat "$PGDATA/PG_VERSION")" != "$(major)" ]; then
  # A major upgrade: these binaries cannot read the old files. Keep them aside (never deleted by the
  # operator) and start afresh: the primary empty, for the operator's load Job to fill from the migration
  # dump; a replica as a clone of the new primary.
  old=$(cat "$PGDATA/PG_VERSION")
  rm -rf "$PGDATA.v$old"
  mv "$PGDATA" "$PGDATA.v$old"
fi

if [ ! -s "$PGDATA/PG_VERSION" ]; then
  if [ "$(role)" = "primary" ]; then
    initdb --username="$POSTGRES_USER" --pwfile=<(printf '%s' "$POSTGRES_PASSWORD") --auth=scram-sha-256 -D "$PGDATA"
    pg_ctl -D "$PGDATA" -w -o "-c config_file=$CONF/postgresql.conf -c hba_file=$CONF/pg_hba.conf -c listen_addresses=''" start
    PGPASSWORD="$POSTGRES_PASSWORD" psql -X -w -v ON_ERROR_STOP=1 -U "$POSTGRES_USER" -d postgres \
      -c "CREATE ROLE replicator WITH REPLICATION LOGIN PASSWORD '${REPLICATION_PASSWORD//\'/\'\'}'"
    pg_ctl -D "$PGDATA" -w stop
  else
    PGPASSWORD="$REPLICATION_PASSWORD" pg_basebackup -h "$PRIMARY_HOST" -U replicator -D "$PGDATA" -R -X stream
  fi
fi

postgres -D "$PGDATA" -c config_file="$CONF/postgresql.conf" -c hba_file="$CONF/pg_hba.conf" &
server=$!
trap 'kill -TERM $server; wait $server' TERM INT

# Follow the label: promote when this replica becomes the primary.
while kill -0 "$server" 2>/dev/null; do
  if [ "$(role)" = "primary" ] && [ -f "$PGDATA/standby.signal" ]; then
    pg_ctl -D "$PGDATA" promote
  fi
  sleep 2
done
wait "$server"
