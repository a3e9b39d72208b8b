#!/bin/bash
# Major version migration, first half: with the NEW major's pg_dumpall, dump the running (old) server at
# $PGHOST into FILE. The second half is restore.sh, run against the new primary once it has started empty.
# With --clean, loading it again (the load Job's retry) gives the same result.
#   migrate.sh dump FILE
#
# A write the old server acknowledged after the dump's snapshot would be in neither the dump nor the new server,
# so the old server is fenced first: read-only for every new transaction, and every client session ended (a
# transaction that was writing is cut off, so it was never acknowledged). It stays fenced once the dump is
# complete, until it is replaced by the new version; if the dump fails it takes writes again.
set -euo pipefail
cmd=${1:?usage: migrate.sh dump FILE}; file=${2:?usage: migrate.sh dump FILE}
[ "$cmd" = dump ] || { echo "usage: migrate.sh dump FILE" >&2; exit 2; }
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
umask 027
admin() { PGOPTIONS="$READ_WRITE_OPTIONS" psql -X -w -q -A -t -v ON_ERROR_STOP=1 -d postgres "$@"; }
done=0
on_exit() {
  rm -f "$file.partial"
  if [ "$done" = 0 ]; then
    echo "the dump did not complete: the old server takes writes again" >&2
    take_writes_again || true
  fi
}
trap on_exit EXIT
wait_for_server
admin -c "ALTER SYSTEM SET default_transaction_read_only = on" -c "SELECT pg_reload_conf()" >/dev/null
# The postmaster re-reads its configuration when it gets to it; sessions it starts before then are read-write.
fenced() { [ "$(psql -X -w -q -A -t -d postgres -c 'SHOW default_transaction_read_only')" = on ]; }
for ((i = 0; i < 100; i++)); do fenced && break; sleep 0.1; done
fenced || { echo "the old server did not become read-only" >&2; exit 1; }
ended=$(admin -c "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
                  WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()")
echo "the old server is read-only; $ended client sessions ended"
mkdir -p "$(dirname "$file")"
pg_dumpall --clean --if-exists | gzip -c > "$file.partial"
gzip -t "$file.partial"
mv "$file.partial" "$file"
done=1
echo "migration dump $file: $(stat -c %s "$file") bytes"
