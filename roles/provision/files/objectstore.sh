#!/bin/bash
# Sourced by archive.sh, base-backup.sh, verify.sh and entrypoint.sh's recovery: spec.backup.objectStore as
# barman-cloud takes it. objectstore.env (beside this file, in /etc/sampledb) holds the settings; the keys are the
# Secret's files, read into barman's environment only: never on a command line, never in a message (redacted replaces
# them).
#   objectstore_settings [FILE]  reads objectstore.env, or FILE (recovery.env: another database's archive); 1 when
#                          it is not there
#   objectstore_keys       exports the keys and the region, and sets s3_args, compress and limit (1 when a key file
#                          cannot be read)
#   redacted TEXT          TEXT's last line that says something, the keys replaced, barman's timestamp and pid cut,
#                          at most 500 characters
#   store_problem          what is wrong with the settings, naming the spec field (store.py probe), or nothing
#   explained TEXT         after a failed barman-cloud call that printed TEXT: store_problem's sentence when it names
#                          a field (barman's words for a refused key or a missing bucket are any error's), else TEXT
objectstore_env=$(dirname "${BASH_SOURCE[0]}")/objectstore.env
objectstore_settings() {
  local file=${1:-$objectstore_env}
  [ -r "$file" ] || return 1
  . "$file"
}
objectstore_keys() {
  AWS_ACCESS_KEY_ID=$(<"$SAMPLEDB_S3_KEYS/ACCESS_KEY_ID") && AWS_SECRET_ACCESS_KEY=$(<"$SAMPLEDB_S3_KEYS/ACCESS_SECRET_KEY") ||
    return 1
  # (a Secret made from a file with CRLF or a trailing space: what was meant is the key without them)
  AWS_ACCESS_KEY_ID=${AWS_ACCESS_KEY_ID//[$'\r\n\t ']/} AWS_SECRET_ACCESS_KEY=${AWS_SECRET_ACCESS_KEY//[$'\r\n\t ']/}
  # (an empty key is no key: boto would look for another, such as the node's instance role)
  [ -n "$AWS_ACCESS_KEY_ID" ] && [ -n "$AWS_SECRET_ACCESS_KEY" ] || return 1
  export AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY AWS_DEFAULT_REGION=$SAMPLEDB_S3_REGION
  export AWS_MAX_ATTEMPTS=2 AWS_RETRY_MODE=standard
  s3_args=()
  [ -n "$SAMPLEDB_S3_ENDPOINT" ] && s3_args+=(--endpoint-url "$SAMPLEDB_S3_ENDPOINT" --addressing-style path)
  compress=()
  [ -n "$SAMPLEDB_S3_COMPRESSION" ] && compress=("--$SAMPLEDB_S3_COMPRESSION")
  # (a store that does not answer, its packets dropped, must not hold the caller: each call is bounded)
  limit=${SAMPLEDB_S3_CALL_SECONDS:-30}
  return 0
}
redacted() {
  local message=$1
  [ -n "${AWS_SECRET_ACCESS_KEY:-}" ] && message=${message//"$AWS_SECRET_ACCESS_KEY"/<secret access key>}
  [ -n "${AWS_ACCESS_KEY_ID:-}" ] && message=${message//"$AWS_ACCESS_KEY_ID"/<access key id>}
  # (an empty message is an empty answer, never a failure: callers run with errexit and pipefail)
  { printf '%s' "$message" | grep -v '^\s*$' || true; } | tail -n 1 |
    sed -E 's/^[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9:,]+ \[[0-9]+\] [A-Z]+: //' | cut -c1-500
}
store_problem() {
  local said rc=0
  # (its answer on stdout only: a warning on stderr is no problem with the settings; bounded apart from barman's calls,
  # short: it follows one that failed, and a server's shutdown waits for the archiver)
  said=$(SAMPLEDB_S3_URL=$SAMPLEDB_S3_URL SAMPLEDB_S3_ENDPOINT=${SAMPLEDB_S3_ENDPOINT:-} \
    SAMPLEDB_S3_REGION=${SAMPLEDB_S3_REGION:-} SAMPLEDB_S3_FIELD=${SAMPLEDB_S3_FIELD:-} timeout -k 2 15 \
    "${BARMAN_PYTHON:-/opt/barman/bin/python}" "$(dirname "${BASH_SOURCE[0]}")/store.py" probe 2>/dev/null) || rc=$?
  case $rc in
    0) redacted "$said" ;;
    124|137) echo "${SAMPLEDB_S3_FIELD:-spec.backup.objectStore}.endpointURL: the object store at ${SAMPLEDB_S3_ENDPOINT:-AWS S3} does not answer within 15s" ;;
    *) echo "store.py probe failed (exit status $rc)" >&2 ;;  # (barman's own message stands)
  esac
}
explained() {
  local problem
  problem=$(store_problem)
  # (only a field named: a store's passing error, a 5xx, is better said by barman's own message)
  if [[ $problem == "${SAMPLEDB_S3_FIELD:-spec.backup.objectStore}."* ]]; then printf '%s\n' "$problem"
  else printf '%s\n' "$1"; fi
}
