"""Faults on the real control plane: a killed operator, an API server outage, an expired watch.

The outage and the expired watch need to stop the API server, so they get a cluster of their own
(started here, stopped at the end) instead of the one the other tests share."""

from __future__ import annotations

import base64
import json
import re
import signal
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from localcluster.build import binary
from localcluster.cluster import LocalCluster
from tests.kube import Kube, wait_for
from tests.operator import TESTOP, OperatorProcess, Widgets, widget_watch

FINALIZER = "test.playbook-operator.dev/cleanup"


def test_operator_killed_mid_run_converges_after_restart(kube: Kube, namespace: str, widgets: Widgets,
                                                         start_operator) -> None:
    watches = [widget_watch(finalizer={"name": FINALIZER, "role": str(TESTOP / "roles" / "widget_finalizer")})]
    first = start_operator(watches, name="first")
    widgets.create("k", {"message": "v1", "sleep": 3})
    first.wait_for_log(r"run start: Widget \S+/k")
    wait_for("the finalizer", lambda: FINALIZER in (widgets.get("k")["metadata"].get("finalizers") or []))
    time.sleep(1)
    first.kill_group()  # SIGKILL in the middle of the run (the role is in its 3 s pause)
    # the killed operator's log is complete: its run for k began and never ended
    assert re.search(rf"run start: Widget {namespace}/k ", first.logs()), first.logs()[-3000:]
    assert first.runs("k") == [], f"the run ended before the kill: {first.runs('k')}"
    widgets.patch("k", {"spec": {"message": "v2", "sleep": 0}})
    second = start_operator(watches, name="second")
    widgets.wait_successful("k", generation=2)
    # observedGeneration is the generation a run was given: the new operator's first run had the edited spec
    assert len(second.runs("k")) == 1, f"generation 2 came only with a later run: {second.runs('k')}"
    cms = [c.metadata.name for c in kube.core.list_namespaced_config_map(namespace).items if c.metadata.name.startswith("k-")]
    assert cms == ["k-cm"]  # nothing duplicated, nothing lost
    assert kube.core.read_namespaced_config_map("k-cm", namespace).data["message"] == "v2"
    assert widgets.get("k")["metadata"]["finalizers"] == [FINALIZER]
    widgets.delete("k")
    wait_for("the finalizer to run and the Widget to go", lambda: not widgets.exists("k"), timeout=60)


# ----------------------------------------------------------------------------- a cluster of our own
@pytest.fixture(scope="module")
def own_cluster() -> Iterator[tuple[LocalCluster, Kube]]:
    cluster = LocalCluster(f"faults-{uuid.uuid4().hex[:6]}")
    try:
        cluster.up()
        kube = Kube(cluster.paths.kubeconfig, str(binary("kubectl")))
        kube.kubectl("apply", "-f", str(TESTOP / "crd.yaml"))
        wait_for("widgets served", lambda: kube.kubectl(
            "get", "widgets.test.playbook-operator.dev", "-A", check=False).returncode == 0)
        yield cluster, kube
    finally:
        cluster.down(purge=True)


@pytest.fixture
def faults(own_cluster: tuple[LocalCluster, Kube], tmp_path: Path) -> Iterator[tuple[LocalCluster, Kube, str, Widgets, list[OperatorProcess]]]:
    cluster, kube = own_cluster
    ns = f"f-{uuid.uuid4().hex[:6]}"
    kube.core.create_namespace({"metadata": {"name": ns}})
    ops: list[OperatorProcess] = []
    yield cluster, kube, ns, Widgets(kube, ns), ops
    for op in ops:
        op.stop()


def start(ops: list[OperatorProcess], kube: Kube, ns: str, tmp_path: Path, **fields: object) -> OperatorProcess:
    op = OperatorProcess(kube, ns, tmp_path, [widget_watch(**fields)], ["--retry-backoff-max", "2s"])
    ops.append(op)
    return op.start()


def etcd_compact(cluster: LocalCluster) -> int:
    """Compacts etcd's history up to now, so that every older resourceVersion is gone (410 for watches)."""
    port = json.loads(cluster.paths.state_file.read_text())["ports"]["etcd_client"]

    def post(path: str, body: dict) -> dict:
        req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=10) as resp:
            return json.loads(resp.read())

    rev = int(post("/v3/kv/range", {"key": base64.b64encode(b"/").decode()})["header"]["revision"])
    post("/v3/kv/compaction", {"revision": str(rev), "physical": True})
    return rev


@pytest.mark.xdist_group("own-cluster")
def test_api_server_outage(faults, tmp_path: Path) -> None:
    cluster, kube, ns, widgets, ops = faults
    op = start(ops, kube, ns, tmp_path)
    widgets.create("before", {"message": "v1"})
    widgets.wait_successful("before")
    assert cluster._stop("kube-apiserver")
    time.sleep(20)
    cluster.up()  # the same API server again, on the same data and port
    assert op.proc is not None and op.proc.poll() is None  # the operator kept running
    widgets.create("after", {"message": "new"})
    widgets.patch("before", {"spec": {"message": "v2"}})
    widgets.wait_successful("after", timeout=90)
    widgets.wait_successful("before", generation=2, timeout=90)
    assert kube.core.read_namespaced_config_map("before-cm", ns).data["message"] == "v2"
    kube.core.delete_namespaced_config_map("after-cm", ns)  # dependent watches resumed too
    wait_for("the ConfigMap to come back", lambda: kube.core.read_namespaced_config_map("after-cm", ns), timeout=60)


@pytest.mark.xdist_group("own-cluster")
def test_expired_watches_relist_without_missing_or_repeating_work(faults, tmp_path: Path) -> None:
    cluster, kube, ns, widgets, ops = faults
    op = start(ops, kube, ns, tmp_path)
    for name in ("changed", "untouched", "victim"):
        widgets.create(name, {"message": name})
    for name in ("changed", "untouched", "victim"):
        widgets.wait_successful(name)
    op.wait_for_log("watching v1, Kind=ConfigMap as a dependent kind")
    assert op.proc is not None
    op.proc.send_signal(signal.SIGSTOP)  # the operator misses everything from here on
    try:
        widgets.patch("changed", {"spec": {"message": "changed meanwhile"}})
        kube.core.delete_namespaced_config_map("victim-cm", ns)
        cluster._stop("kube-apiserver")
        etcd_compact(cluster)  # the operator's resourceVersions are history now: its watches get 410
        cluster.up()
    finally:
        op.proc.send_signal(signal.SIGCONT)
    widgets.wait_successful("changed", generation=2, timeout=90)
    wait_for("the deleted dependent to be recreated",
             lambda: kube.core.read_namespaced_config_map("victim-cm", ns), timeout=90)
    time.sleep(3)
    assert re.search(r"watch of v1, Kind=ConfigMap( in \S+)? expired \(410 Gone\): relisting", op.logs())
    assert len(op.runs("untouched")) == 1  # relisting did not repeat work for unchanged objects
    assert kube.core.read_namespaced_config_map("changed-cm", ns).data["message"] == "changed meanwhile"




def run_starts(op: OperatorProcess, name: str, since: int) -> list[str]:
    """The run starts for Widget ``name`` logged after the first ``since`` characters of the log."""
    return re.findall(rf"run start: Widget \S+/{name} .*", op.logs()[since:])


@pytest.mark.xdist_group("own-cluster")
def test_a_relist_reports_deletions_and_recreations(faults, tmp_path: Path) -> None:
    """While the operator misses everything and its watch expires, one CR is deleted and another deleted and
    created again with the same spec: the relist must tell both apart from what it remembers (by UID)."""
    cluster, kube, ns, widgets, ops = faults
    op = start(ops, kube, ns, tmp_path, reconcilePeriod="1h")
    widgets.create("gone", {"message": "gone"}, annotations={"ansible.sdk.operatorframework.io/reconcile-period": "3s"})
    widgets.create("reborn", {"message": "same spec"})
    widgets.wait_successful("gone")
    old = widgets.wait_successful("reborn")
    assert op.proc is not None
    op.proc.send_signal(signal.SIGSTOP)
    try:
        widgets.delete("gone")
        widgets.delete("reborn")
        wait_for("reborn to go", lambda: not widgets.exists("reborn"))
        widgets.create("reborn", {"message": "same spec"})
        cluster._stop("kube-apiserver")
        etcd_compact(cluster)
        cluster.up()
    finally:
        mark = len(op.logs())
        op.proc.send_signal(signal.SIGCONT)
    time.sleep(10)  # the deleted one's resync (3 s) would run the role against its ghost
    assert run_starts(op, "gone", mark) == [], op.logs()[mark:]
    new = widgets.wait_successful("reborn", timeout=60)  # the new object gets its own run
    assert new["metadata"]["uid"] != old["metadata"]["uid"]
