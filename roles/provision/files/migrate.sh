#!/bin/bash
# Major version migration, first half: with the NEW major's pg_dumpall, dump the running (old) server at
# $PGHOST into FILE. The second half is restore.sh, run against the new primary once it has started empty.
# With --clean, loading it again (the load Job's retry) gives the same result.
#   migrate.sh dump FILE
set -euo pipefail
cmd=${1:?usage: migrate.sh dump FILE}; file=${2:?usage: migrate.sh dump FILE}
[ "$cmd" = dump ] || { echo "usage: migrate.sh dump FILE" >&2; exit 2; }
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
umask 027
trap 'rm -f "$file.partial"' EXIT
wait_for_server
mkdir -p "$(dirname "$file")"
pg_dumpall --clean --if-exists | gzip -c > "$file.partial"
gzip -t "$file.partial"
mv "$file.partial" "$file"
echo "migration dump $file: $(stat -c %s "$file") bytes"
