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
