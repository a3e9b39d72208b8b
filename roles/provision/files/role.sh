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
# (the downward API writes key="value", the value quoted as Go's %q: a \" or \\ inside is unquoted here)
_podinfo() { sed -n "s/^$(printf '%s' "$2" | sed 's/[.\/]/\\&/g')=\"\(.*\)\"\$/\1/p" "$1" 2>/dev/null | sed 's/\\\(["\\]\)/\1/g' || true; }
role() { _podinfo "$LABELS" sampledb.example.com/role; }
annotation() { _podinfo "$ANNOTATIONS" "sampledb.example.com/$1"; }

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
fenced_now() { [ -f "$FENCED" ] && [ "$(role)" = replica ]; }
mark_if_replica() { [ "$(role)" != replica ] || [ -f "$FENCED" ] || : >"$FENCED"; }
unfence_if_primary() { [ "$(role)" = primary ] && rm -f "$FENCED"; }
