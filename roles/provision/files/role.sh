#!/bin/bash
# Sourced by entrypoint.sh, fenced.sh and state.sh: what the operator tells this server, through its own pod's labels
# and annotations (a downward API volume, refreshed by the kubelet while the pod runs):
#   label sampledb.example.com/role                      primary | replica
#   sampledb.example.com/bootstrap                       "initdb": this server may initialise an empty volume
#   sampledb.example.com/upgrade-from                    a major upgrade from that major is under way: data of that
#                                                        major is kept aside and this server starts afresh
#   sampledb.example.com/upgrade-rollback                that major upgrade is rolled back: a server of the old
#                                                        major takes its kept-aside data back
#   sampledb.example.com/fence                           why clients are kept out (only the superuser and the
#                                                        replicas get in): a major upgrade's dump, the final backup
#   sampledb.example.com/synchronous-standby-names       the primary's synchronous_standby_names
#   sampledb.example.com/servers                         every server of the database: the primary keeps a
#                                                        replication slot for each other one (and drops those of
#                                                        servers that are gone), and a replica streams through its own
PODINFO=${PODINFO_DIR:-/etc/podinfo}
LABELS=${LABELS_FILE:-$PODINFO/labels}
ANNOTATIONS=${ANNOTATIONS_FILE:-$(dirname "$LABELS")/annotations}
# podinfo VAR FILE KEY: KEY's value in FILE, into VAR ('' when there is none). The downward API writes key="value"
# lines, the value quoted as Go's %q: a \" or \\ inside is unquoted here. Builtins only: the loop that follows the
# label reads it five times a second, in every server.
podinfo() {
  local __line __value=""
  if [ -r "$2" ]; then
    {
      while IFS= read -r __line || [ -n "$__line" ]; do
        if [[ "$__line" == "$3=\""*\" ]]; then __value=${__line:${#3}+2:-1}; fi
      done <"$2"
    } 2>/dev/null || true  # (a file that cannot be opened reads as empty: never the end of the caller's set -e script)
  fi
  __value=${__value//\\\\/$'\1'}  # (\\ first, so that the \ of \\" is not taken for an escaped quote)
  __value=${__value//\\\"/\"}
  printf -v "$1" '%s' "${__value//$'\1'/\\}"
}
read_role() { podinfo "$1" "$LABELS" sampledb.example.com/role; }
read_annotation() { podinfo "$1" "$ANNOTATIONS" "sampledb.example.com/$2"; }
role() { local r; read_role r; printf '%s\n' "$r"; }
annotation() { local a; read_annotation a "$1"; printf '%s\n' "$a"; }

# The fence's mark, in the pod's run directory (an emptyDir: it outlives a container's restart, not the pod). It
# says: no server of this pod takes writes, now or later, while the label says replica. entrypoint.sh writes it when
# a container starts with the replica label and once a primary's server has stopped for that label, and removes it
# before a server of this pod starts or is promoted as the primary; each is one step with reading the label, under a
# lock. fenced.sh (run by the operator) reads it under the same lock.
RUN_DIR=${PGHOST:-/var/run/postgresql}
FENCED="$RUN_DIR/sampledb-fenced"
locked() {  # locked CMD...: CMD under the lock
  local rc=0
  exec 9>>"$RUN_DIR/sampledb-role.lock"
  flock 9
  "$@" || rc=$?
  exec 9>&-  # (closed before the caller starts a server, which would hold the lock)
  return "$rc"
}
fenced_now() { local r; read_role r; [ -f "$FENCED" ] && [ "$r" = replica ]; }
mark_if_replica() { local r; read_role r; [ "$r" != replica ] || [ -f "$FENCED" ] || : >"$FENCED"; }
unfence_if_primary() { local r; read_role r; [ "$r" = primary ] && rm -f "$FENCED"; }
