#!/bin/bash
# Bootstrap of a new SampleDB, and the last step of a restore: the application role (with this database's
# password: backups carry no passwords) and database. Idempotent: safe to run again.
set -euo pipefail
: "${APP_DATABASE:?}" "${APP_USER:?}" "${APP_PASSWORD:?}"
until pg_isready -q; do sleep 1; done
psql -v ON_ERROR_STOP=1 -d postgres -v user="$APP_USER" -v pass="$APP_PASSWORD" -v db="$APP_DATABASE" <<'SQL'
SELECT format('CREATE ROLE %I LOGIN', :'user')
  WHERE NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = :'user') \gexec
SELECT format('ALTER ROLE %I LOGIN PASSWORD %L', :'user', :'pass') \gexec
SELECT format('CREATE DATABASE %I OWNER %I', :'db', :'user')
  WHERE NOT EXISTS (SELECT 1 FROM pg_database WHERE datname = :'db') \gexec
SQL
echo "bootstrap of $APP_DATABASE done"
