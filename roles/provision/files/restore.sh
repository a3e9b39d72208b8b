#!/bin/bash
# Loads a backup made by backup.sh into the server at $PGHOST (a new, empty SampleDB).
set -euo pipefail
: "${BACKUP_FILE:?}"
[ -s "$BACKUP_FILE" ] || { echo "backup $BACKUP_FILE is missing or empty" >&2; exit 1; }
gzip -t "$BACKUP_FILE"
until pg_isready -q; do sleep 1; done
gunzip -c "$BACKUP_FILE" | psql -v ON_ERROR_STOP=0 -q -d postgres >/dev/null
echo "restored $BACKUP_FILE"
