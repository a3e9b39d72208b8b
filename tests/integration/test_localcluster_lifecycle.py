"""`playbook-operator cluster up/down/status/env` on a cluster of its own (not the suite's)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid

import pytest

from localcluster.cluster import START_ORDER, LocalCluster

pytestmark = pytest.mark.cluster


def _cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "runner", "cluster", *args], env=env,
                          capture_output=True, text=True, timeout=300)


def test_up_is_idempotent_survives_a_crash_and_down_leaves_nothing(tmp_path) -> None:
    name = f"lifecycle-{uuid.uuid4().hex[:6]}"
    env = dict(os.environ, PLAYBOOK_OPERATOR_CLUSTER=name)
    cluster = LocalCluster(name)
    try:
        first = _cli("up", env=env)
        assert first.returncode == 0, first.stderr
        assert "up in" in first.stderr
        pids = {c: cluster.pid(c) for c in START_ORDER}
        assert all(pids.values()), pids

        again_start = time.monotonic()
        again = _cli("up", env=env)
        assert again.returncode == 0 and "already running" in again.stderr
        assert time.monotonic() - again_start < 10
        assert {c: cluster.pid(c) for c in START_ORDER} == pids  # nothing restarted

        status = _cli("status", env=env)
        assert status.returncode == 0
        for c in START_ORDER:
            assert c in status.stdout and f"pid {pids[c]}" in status.stdout
        assert str(cluster.paths.logs) in status.stdout

        env_out = _cli("env", env=env).stdout
        assert f"export KUBECONFIG={cluster.paths.kubeconfig}" in env_out

        # data written before a crash is there after `up` restarts the dead components
        cluster.kubectl("create", "configmap", "survivor", "--from-literal=k=v")
        for c in ("kube-apiserver", "etcd"):
            os.kill(pids[c], signal.SIGKILL)
        revived = _cli("up", env=env)
        assert revived.returncode == 0, revived.stderr
        assert cluster.pid("etcd") not in (None, pids["etcd"])
        # (it failed once in a loaded CI run with no clue left: the cluster is purged below, so say why here)
        assert cluster.pid("kube-controller-manager") == pids["kube-controller-manager"], \
            cluster._log_file("kube-controller-manager").read_text()[-4000:]
        got = cluster.kubectl("get", "configmap", "survivor", "-o", "jsonpath={.data.k}")
        assert got.stdout == "v"

        down = _cli("down", env=env)
        assert down.returncode == 0
        live = {c: cluster.pid(c) for c in START_ORDER}
        assert not any(live.values()), live
        # no process of ours left, whatever the pid files say: every component's command line names the data dir
        assert subprocess.run(["pgrep", "-f", str(cluster.paths.root)], capture_output=True).stdout == b""
        assert _cli("status", env=env).returncode == 3
    finally:
        cluster.down(purge=True)
    assert not cluster.paths.root.exists()
