#!/bin/bash
# Sourced by the Jobs' scripts. They reach the primary as $PGHOST:$PGPORT (the <name>-primary Service).

# Waits until the server accepts connections, for at most $PG_WAIT_SECONDS (300); fails after that, so that the
# Job fails (and says why) instead of running forever.
wait_for_server() {
  local limit=${PG_WAIT_SECONDS:-300} start=$SECONDS
  until pg_isready -q; do
    if ((SECONDS - start >= limit)); then
      echo "no PostgreSQL server accepting connections at ${PGHOST:-the local socket}:${PGPORT:-5432} after ${limit}s" >&2
      return 1
    fi
    sleep 2
  done
}

# A server is made read-only around a major upgrade (migrate.sh fences the old one, entrypoint.sh starts the new
# one so). The operator's own sessions write whatever the server's default is, and lift it when done.
READ_WRITE_OPTIONS="-c default_transaction_read_only=off"
take_writes_again() {
  PGOPTIONS="$READ_WRITE_OPTIONS" psql -X -w -q -v ON_ERROR_STOP=1 -d postgres \
    -c "ALTER SYSTEM RESET default_transaction_read_only" -c "SELECT pg_reload_conf()" >/dev/null
}
