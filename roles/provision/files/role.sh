#!/bin/bash
# Sourced by entrypoint.sh and fenced.sh: what this server is, as its pod label sampledb.example.com/role says (the
# operator's leader role sets it; /etc/podinfo/labels is a downward API volume, refreshed while the pod runs).
LABELS=${LABELS_FILE:-/etc/podinfo/labels}
role() { sed -n 's/^sampledb\.example\.com\/role="\(.*\)"$/\1/p' "$LABELS" 2>/dev/null || true; }

# The fence's mark, in the pod's run directory (an emptyDir: it outlives a container's restart, not the pod).
# entrypoint.sh writes it once this pod's server has stopped because its label said replica, and removes it before
# a server of this pod starts or is promoted as the primary; reading the label and the mark (fenced.sh), or the
# label and removing the mark (entrypoint.sh), is one step under a lock. So while the mark is there and the label
# says replica, no server of this pod takes writes, now or later.
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
unfence_unless_replica() { [ "$(role)" = replica ] || rm -f "$FENCED"; }
unfence_if_primary() { [ "$(role)" = primary ] && rm -f "$FENCED"; }
