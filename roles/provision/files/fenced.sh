#!/bin/bash
# fenced.sh [SECONDS]: run by the operator in a server container (exec) after relabelling it replica, to promote
# another server as soon as this one takes no more writes, without waiting for the kubelet to report the container
# stopped (its next relist, a second or more). Exits 0 once this pod's fence mark is there and its label says replica
# (role.sh: no server of this pod takes writes, now or later), printing the WAL position this server stopped at when
# it was the primary (its shutdown checkpoint; the promoted server must have received it); 1 if not after SECONDS (10).
set -uo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/role.sh"
for ((i = 0; i <= ${1:-10} * 10; i++)); do
  if locked fenced_now; then
    echo "stopped=$(cat "$FENCED" 2>/dev/null)"
    exit 0
  fi
  sleep 0.1
done
echo "the server of $HOSTNAME has not stopped after ${1:-10}s"
exit 1
