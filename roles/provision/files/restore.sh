#!/bin/bash
# Loads a backup made by backup.sh (or a migration dump made by migrate.sh) into the server at $PGHOST (a new, empty
# SampleDB, or a major upgrade's new server). The superuser and the replication role are this database's own: the
# dump's statements about them are left out (dropping the replication role would lock the replicas out while they
# clone). Errors expected from the rest of the roles (they exist already) are ignored; any other error fails the load.
# Backups carry no passwords: the login roles left without one are named (stdout and the termination message).
set -euo pipefail
: "${BACKUP_FILE:?}"
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
[ -s "$BACKUP_FILE" ] || { echo "backup $BACKUP_FILE is missing or empty" >&2; exit 1; }
gzip -t "$BACKUP_FILE"
wait_for_server
wait_for_fence
su_role=${PGUSER:-postgres} repl_role=${REPLICATION_USER:-replicator}
own_roles="$(printf '%s|%s' "$su_role" "$repl_role" | sed 's/[][\.*^$/]/\\&/g')"
rc=0
# (an older operator's major upgrade made the new server read-only until loaded)
export PGOPTIONS="${PGOPTIONS:-} $READ_WRITE_OPTIONS"
errors=$(gunzip -c "$BACKUP_FILE" | sed -E "/^(DROP|CREATE|ALTER) ROLE (IF EXISTS )?\"?($own_roles)\"?( |;|$)/d" |
  psql -X -w -q -v ON_ERROR_STOP=0 -d postgres 2>&1 >/dev/null) || rc=$?
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
passwordless=$(psql -X -w -q -A -t -d postgres -v su="$su_role" -v repl="$repl_role" -v app="${APP_USER:-}" <<'SQL'
select string_agg(rolname, ',' order by rolname) from pg_authid
 where rolcanlogin and rolpassword is null and rolname not in (:'su', :'repl', :'app')
SQL
)
if [ -n "$passwordless" ]; then
  echo "restored $BACKUP_FILE; these login roles have no password (backups carry none): $passwordless"
  if [ -w /dev/termination-log ]; then printf 'passwordless=%s\n' "$passwordless" > /dev/termination-log; fi
else
  echo "restored $BACKUP_FILE"
fi
if [ -n "${REMOVE_AFTER_LOAD:-}" ]; then
  # a major upgrade's migration dump holds every role's password hash: it goes once it is loaded (last: a retry of
  # this Job after a later failure loads it again)
  rm -f "$BACKUP_FILE"
  echo "removed $BACKUP_FILE"
fi
