#!/bin/bash
# Loads a backup made by backup.sh (or a migration dump made by migrate.sh) into the server at $PGHOST (a new,
# empty SampleDB). The dump recreates the roles that exist already (the superuser, the replication role) and
# cannot drop the superuser it runs as: those errors are expected; any other error fails the load.
set -euo pipefail
: "${BACKUP_FILE:?}"
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
[ -s "$BACKUP_FILE" ] || { echo "backup $BACKUP_FILE is missing or empty" >&2; exit 1; }
gzip -t "$BACKUP_FILE"
wait_for_server
rc=0
# (a major upgrade's new server is read-only until loaded)
export PGOPTIONS="${PGOPTIONS:-} $READ_WRITE_OPTIONS"
errors=$(gunzip -c "$BACKUP_FILE" | psql -X -w -q -v ON_ERROR_STOP=0 -d postgres 2>&1 >/dev/null) || rc=$?
[ -z "$errors" ] || printf '%s\n' "$errors" >&2
[ "$rc" = 0 ] || { echo "loading $BACKUP_FILE failed (psql exit status $rc)" >&2; exit 1; }
unexpected=$(printf '%s\n' "$errors" | grep -iE '(error|fatal):' |
  grep -vE 'role "[^"]+" already exists|current user cannot be dropped' || true)
if [ -n "$unexpected" ]; then
  echo "loading $BACKUP_FILE failed:" >&2
  printf '%s\n' "$unexpected" >&2
  exit 1
fi
take_writes_again
echo "restored $BACKUP_FILE"
