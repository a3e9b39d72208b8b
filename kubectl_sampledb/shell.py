"""psql in a server, the way `kubectl cnpg psql` does it: by handing the terminal to `kubectl exec`, which
already knows how to carry a TTY, resizes and signals (the user's kubeconfig, context and namespace passed on)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence

from . import SERVER_CONTAINER
from .errors import CliError, NotAServer
from .kube import Cluster, Target, pod_ready, pod_role

# psql's arguments are the shell's "$@": never re-quoted, never spliced into the script; the password
# moves from the container's environment to PGPASSWORD inside the pod.
PSQL_EXEC_SCRIPT = 'PGPASSWORD="$POSTGRES_PASSWORD" exec psql "$@"'


def choose_server(cluster: Cluster, name: str, replica: bool = False, server: str | None = None) -> str:
    """The primary (status.currentPrimary, else the pod labelled primary), the first Ready replica, or the
    server named."""
    db = cluster.sampledb(name)
    pods = cluster.server_pods(name)
    names = [p.metadata.name for p in pods]
    if server:
        if server not in names:
            raise NotAServer(server, name, names)
        return server
    if replica:
        ready = [p.metadata.name for p in pods if pod_role(p) == "replica" and pod_ready(p)]
        if not ready:
            raise CliError(f"sampledb {name} has no Ready replica")
        return ready[0]
    current = (db.get("status") or {}).get("currentPrimary")
    if current in names:
        return current
    labelled = [p.metadata.name for p in pods if pod_role(p) == "primary"]
    if labelled:
        return labelled[0]
    phase = (db.get("status") or {}).get("phase") or "Pending"
    raise CliError(f"sampledb {name} has no primary now (phase {phase}); try again, or --replica")


def psql_argv(kubectl: str, target: Target, pod: str, psql_args: Sequence[str], tty: bool) -> list[str]:
    """-t only with a terminal on stdin: piped input and `-c` need plain streams; -i so that piped SQL arrives."""
    return [kubectl, *target.kubectl_flags(), "exec", "-it" if tty else "-i", pod, "-c", SERVER_CONTAINER, "--",
            "sh", "-c", PSQL_EXEC_SCRIPT, "psql", *psql_args]


def find_kubectl() -> str:
    found = os.environ.get("KUBECTL") or shutil.which("kubectl")
    if not found:
        raise CliError("kubectl not found on PATH (psql runs kubectl exec); set KUBECTL to its path")
    return found
