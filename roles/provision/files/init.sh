#!/bin/bash
# Bootstrap of a new SampleDB, and the last step of a restore: the application role (with this database's
# password: backups carry no passwords) and database, and, when $REPLICATION_PASSWORD is given, the replication
# role's password (a restored backup recreates that role without one, and the replicas could not clone).
# Idempotent: safe to run again.
set -euo pipefail
: "${APP_DATABASE:?}" "${APP_USER:?}" "${APP_PASSWORD:?}"
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
wait_for_server
vars=(-v user="$APP_USER" -v pass="$APP_PASSWORD" -v db="$APP_DATABASE")
if [ -n "${REPLICATION_PASSWORD:-}" ]; then
  vars+=(-v repl_user="${REPLICATION_USER:-replicator}" -v repl_pass="$REPLICATION_PASSWORD")
fi
psql -X -w -v ON_ERROR_STOP=1 -d postgres "${vars[@]}" <<'SQL'
SELECT format('CREATE ROLE %I LOGIN', :'user')
  WHERE NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = :'user') \gexec
SELECT format('ALTER ROLE %I LOGIN PASSWORD %L', :'user', :'pass') \gexec
SELECT format('CREATE DATABASE %I OWNER %I', :'db', :'user')
  WHERE NOT EXISTS (SELECT 1 FROM pg_database WHERE datname = :'db') \gexec
\if :{?repl_pass}
SELECT format('CREATE ROLE %I', :'repl_user')
  WHERE NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = :'repl_user') \gexec
SELECT format('ALTER ROLE %I WITH REPLICATION LOGIN PASSWORD %L', :'repl_user', :'repl_pass') \gexec
\endif
SQL
echo "bootstrap of $APP_DATABASE done"
