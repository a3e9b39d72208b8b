#!/bin/bash
# A logical backup of the whole server (every database, roles included, but not their passwords: those
# belong to the database's credentials Secret, and a restored database keeps its own) into $BACKUP_FILE (gzip).
# Written under a temporary name and renamed when complete, so a failed backup never looks finished.
# Prints the size; also writes it to the termination message, where the operator reads it.
set -euo pipefail
: "${BACKUP_FILE:?}"
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
umask 027  # a dump holds the data: for the Jobs' user (and the volume's group) only
trap 'rm -f "$BACKUP_FILE.partial"' EXIT
wait_for_server
wait_for_fence
mkdir -p "$(dirname "$BACKUP_FILE")"
pg_dumpall --clean --if-exists --no-role-passwords --lock-wait-timeout="${LOCK_WAIT_TIMEOUT:-60s}" | gzip -c > "$BACKUP_FILE.partial"
gzip -t "$BACKUP_FILE.partial"
mv "$BACKUP_FILE.partial" "$BACKUP_FILE"
size=$(stat -c %s "$BACKUP_FILE")
echo "backup $BACKUP_FILE: $size bytes"
if [ -w /dev/termination-log ]; then printf 'size=%s\n' "$size" > /dev/termination-log; fi
