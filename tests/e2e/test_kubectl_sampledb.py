"""`kubectl sampledb` on the real node: the installed console script, run as a user runs it, against a Ready
three-server database. status shows the primary and two streaming replicas with their timeline and lag (and
-o json parses), backup completes and is then listed by status, switchover moves the primary, and psql runs
SQL without a terminal. No credential appears in anything it prints."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.kube import Kube, wait_for
from tests.realnode import NODE_LANE, credentials, psql_in_server, ready_database, wait_endpoints
from tests.sampledb import get, roles

pytestmark = [pytest.mark.e2e, NODE_LANE]

# installed with the project (pyproject's [project.scripts]), beside this interpreter
PLUGIN = Path(sys.executable).parent / "kubectl-sampledb"


def plugin(real: Kube, namespace: str, *args: str, check: bool = True, timeout: float = 120,
           secrets: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    """Runs the plugin as kubectl would (the cluster from KUBECONFIG, kubectl on PATH), stdin not a terminal."""
    proc = subprocess.run([str(PLUGIN), "-n", namespace, *args], env=real.env(), stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=timeout)
    for secret in secrets:
        assert secret not in proc.stdout and secret not in proc.stderr, f"a password in the output of {args}"
    if check:
        assert proc.returncode == 0, f"kubectl sampledb {' '.join(args)} failed ({proc.returncode}): {proc.stderr}"
    return proc


def server_rows(text: str) -> dict[str, list[str]]:
    """The Servers table of `status`, each server's cells by its name."""
    lines = text.split("\nServers\n", 1)[1].split("\n\n", 1)[0].splitlines()
    return {cells[0]: cells for cells in (line.split() for line in lines[1:]) if cells and not cells[0].endswith(":")}


def status_json(real: Kube, namespace: str, name: str, secrets: tuple[str, ...]) -> dict[str, Any]:
    return json.loads(plugin(real, namespace, "status", name, "-o", "json", secrets=secrets).stdout)


def streaming_with_lag(doc: dict[str, Any], primary: str) -> bool:
    """The primary and every other server a replica streaming from it, with a timeline and a measured lag."""
    servers = {s["name"]: s for s in doc["servers"]}
    replicas = [s for n, s in servers.items() if n != primary]
    return (servers[primary]["role"] == "primary" and servers[primary]["in_recovery"] is False
            and servers[primary]["timeline"] is not None and len(replicas) == 2
            and all(s["role"] == "replica" and s["reachable"] and (s["replication"] or {}).get("state") == "streaming"
                    and s["replication"]["lag_bytes"] is not None and s["replication"]["lag_seconds"] is not None
                    and s["timeline"] == servers[primary]["timeline"] for s in replicas))


def test_kubectl_sampledb_status_backup_switchover_and_psql(real: Kube, real_namespace: str,
                                                            real_sampledb_operator) -> None:
    real_sampledb_operator()
    ns, name = real_namespace, "plug"
    primary = ready_database(real, ns, name)["status"]["currentPrimary"]
    servers = sorted(roles(real, ns, name))
    assert len(servers) == 3
    secrets = (credentials(real, ns, name, password_key="superuser-password").password,
               credentials(real, ns, name).password)

    # status: the primary and two streaming replicas, each with a timeline and its lag
    def streaming() -> dict[str, Any] | None:
        d = status_json(real, ns, name, secrets)
        # (and between two runs: while one runs, its status holds no result, as the Go operator's does)
        return d if streaming_with_lag(d, primary) and d["operator"]["last_run"] is not None else None

    doc = wait_for("status to show two streaming replicas with their lag, and the last run", streaming, timeout=180,
                   interval=1)
    assert doc["name"] == name and doc["namespace"] == ns and doc["phase"] == "Ready"
    assert doc["current_primary"] == primary and doc["services"]["primary"] == [primary]
    assert doc["operator"]["last_run"] is not None

    text = plugin(real, ns, "status", name, secrets=secrets).stdout
    assert "\x1b[" not in text  # piped: no colour
    rows = server_rows(text)
    assert sorted(rows) == servers
    assert rows[primary][1:3] == ["primary", "yes"] and rows[primary][3].isdigit()
    for server in servers:
        if server != primary:
            cells = rows[server]
            assert cells[1:3] == ["replica", "yes"] and cells[3] == rows[primary][3], cells
            assert cells[5] == "streaming" and cells[-1].endswith(("s", "m")), cells  # ... LAG, REPLAY LAG
    assert f"{name}-primary → {primary}" in text

    # psql without a terminal: arguments after -- go to psql, on the primary or a replica
    assert plugin(real, ns, "psql", name, "--", "-XAtq", "-c", "select 1", secrets=secrets).stdout.strip() == "1"
    assert plugin(real, ns, "psql", name, "--replica", "--", "-XAtq", "-c", "select pg_is_in_recovery()",
                  secrets=secrets).stdout.strip() == "t"
    # piped SQL reaches it too (kubectl exec -i)
    piped = subprocess.run([str(PLUGIN), "psql", name, "-n", ns, "--", "-XAtq"], env=real.env(),
                           input="select 40 + 2;\n", capture_output=True, text=True, timeout=120)
    assert piped.returncode == 0 and piped.stdout.strip() == "42", piped.stderr

    # backup: follows it to Completed, and status lists it afterwards
    backup = f"{name}-manual"
    proc = plugin(real, ns, "backup", name, "--backup-name", backup, "--timeout", "400", timeout=450, secrets=secrets)
    assert f"{backup} Completed" in proc.stdout, proc.stdout
    listed = {b["name"]: b for b in status_json(real, ns, name, secrets)["backups"]}
    assert listed[backup]["phase"] == "Completed" and listed[backup]["size"], listed
    text = plugin(real, ns, "status", name, secrets=secrets).stdout
    assert any(line.split()[:3] == [backup, "OnDemand", "Completed"] for line in text.splitlines() if line.split())

    # switchover: the plugin returns once status.currentPrimary is the server asked for and its Service routes to it
    target = f"{name}-2" if primary != f"{name}-2" else f"{name}-1"
    proc = plugin(real, ns, "switchover", name, "--to", target, "--timeout", "300", timeout=360, secrets=secrets)
    assert f"{name}-primary routes to {target}" in proc.stdout, proc.stdout
    assert get(real, ns, name)["status"]["currentPrimary"] == target
    wait_endpoints(real, ns, f"{name}-primary", [target])
    wait_for(f"{target} to accept writes", lambda: psql_in_server(
        real, ns, target, "select pg_is_in_recovery()", check=False) == "f", timeout=120, interval=1)
    assert plugin(real, ns, "psql", name, "--", "-XAtq", "-c", "select pg_is_in_recovery()",
                  secrets=secrets).stdout.strip() == "f"

    def moved() -> dict[str, Any] | None:
        d = status_json(real, ns, name, secrets)
        new = next(s for s in d["servers"] if s["name"] == target)
        return d if d["current_primary"] == target and new["role"] == "primary" and new["in_recovery"] is False \
            else None

    wait_for("status to show the new primary", moved, timeout=120, interval=2)


def test_kubectl_sampledb_errors_are_one_line(real: Kube, real_namespace: str, real_sampledb_crds: None) -> None:
    proc = plugin(real, real_namespace, "status", "absent", check=False)
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr == f"error: sampledb absent not found in namespace {real_namespace}\n"
