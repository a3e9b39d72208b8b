#!/bin/bash
# Major version migration, first half: with the NEW major's pg_dumpall, dump the running (old) server at $PGHOST into
# FILE. The second half is restore.sh, run against the new primary once it has started empty. With --clean, loading
# it again (the load Job's retry) gives the same result.
#   migrate.sh dump FILE
#
# A write the old server acknowledged after the dump's snapshot would be in neither the dump nor the new server, so
# the dump waits until the server is fenced (REQUIRE_FENCE: the operator's annotation, entrypoint.sh's pg_hba.conf and
# the sessions it ended: no client but the superuser gets in). The operator lifts the fence if the dump fails.
set -euo pipefail
cmd=${1:?usage: migrate.sh dump FILE}; file=${2:?usage: migrate.sh dump FILE}
[ "$cmd" = dump ] || { echo "usage: migrate.sh dump FILE" >&2; exit 2; }
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
umask 027
trap 'rm -f "$file.partial"' EXIT
wait_for_server
wait_for_fence
mkdir -p "$(dirname "$file")"
pg_dumpall --clean --if-exists --lock-wait-timeout="${LOCK_WAIT_TIMEOUT:-60s}" | gzip -c > "$file.partial"
gzip -t "$file.partial"
mv "$file.partial" "$file"
echo "migration dump $file: $(stat -c %s "$file") bytes"
