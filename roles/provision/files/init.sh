#!/bin/bash
# Bootstrap of a new SampleDB, and the last step of a restore: the application role (with this database's password:
# backups carry no passwords) and database, and, when $REPLICATION_PASSWORD is given, the replication role's password.
# The passwords reach psql from its environment (\getenv), never its command line, and the statements that carry them
# are not logged. Idempotent: safe to run again.
set -euo pipefail
: "${APP_DATABASE:?}" "${APP_USER:?}" "${APP_PASSWORD:?}"
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
wait_for_server
vars=(-v user="$APP_USER" -v db="$APP_DATABASE")
[ -z "${REPLICATION_PASSWORD:-}" ] || vars+=(-v repl_user="${REPLICATION_USER:-replicator}")
psql -X -w -v ON_ERROR_STOP=1 -d postgres "${vars[@]}" <<'SQL'
SET log_statement = 'none';
SET log_min_duration_statement = -1;
SET log_min_error_statement = panic;
\getenv pass APP_PASSWORD
SELECT format('CREATE ROLE %I LOGIN', :'user')
  WHERE NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = :'user') \gexec
SELECT format('ALTER ROLE %I LOGIN PASSWORD %L', :'user', :'pass') \gexec
SELECT format('CREATE DATABASE %I OWNER %I', :'db', :'user')
  WHERE NOT EXISTS (SELECT 1 FROM pg_database WHERE datname = :'db') \gexec
\if :{?repl_user}
\getenv repl_pass REPLICATION_PASSWORD
SELECT format('CREATE ROLE %I', :'repl_user')
  WHERE NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = :'repl_user') \gexec
SELECT format('ALTER ROLE %I WITH REPLICATION LOGIN PASSWORD %L', :'repl_user', :'repl_pass') \gexec
\endif
SQL
echo "bootstrap of $APP_DATABASE done"
