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

# A backup that must see no client's write after it began (a major upgrade's dump, the final backup) waits until the
# primary says it is fenced (REQUIRE_FENCE: the sampledb.fence setting entrypoint.sh gives it once every other client
# is out and kept out), for at most PG_WAIT_SECONDS.
wait_for_fence() {
  [ -n "${REQUIRE_FENCE:-}" ] || return 0
  local limit=${PG_WAIT_SECONDS:-300} start=$SECONDS
  until [ "$(psql -X -w -q -A -t -d postgres -c "select current_setting('sampledb.fence', true)" 2>/dev/null)" = "$REQUIRE_FENCE" ]; do
    if ((SECONDS - start >= limit)); then
      echo "the server at ${PGHOST:-the local socket} did not fence its clients ($REQUIRE_FENCE) within ${limit}s" >&2
      return 1
    fi
    sleep 1
  done
  echo "the server is fenced ($REQUIRE_FENCE): no other client can write"
}

# An older version of this operator made a server read-only around a major upgrade (migrate.sh fences the old one, entrypoint.sh starts the new
# one so). The operator's own sessions write whatever the server's default is, and lift it when done.
READ_WRITE_OPTIONS="-c default_transaction_read_only=off"
take_writes_again() {
  PGOPTIONS="$READ_WRITE_OPTIONS" psql -X -w -q -v ON_ERROR_STOP=1 -d postgres \
    -c "ALTER SYSTEM RESET default_transaction_read_only" -c "SELECT pg_reload_conf()" >/dev/null
}
