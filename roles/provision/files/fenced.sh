#!/bin/bash
# fenced.sh [SECONDS]: run by the operator in a primary's server container (exec) after relabelling it replica, to
# promote another server as soon as this one has stopped taking writes, without waiting for the kubelet to report
# the container stopped (its next relist, a second or more). Exits 0 once this pod's server has stopped for its
# replica label (role.sh: the fence's mark), 1 if it has not after SECONDS (10).
set -uo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/role.sh"
for ((i = 0; i <= ${1:-10} * 10; i++)); do
  if locked fenced_now; then echo "the server of $HOSTNAME has stopped and will not take writes"; exit 0; fi
  sleep 0.1
done
echo "the server of $HOSTNAME has not stopped after ${1:-10}s"
exit 1
