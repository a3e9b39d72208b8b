"""Shared pieces of the benchmarks: a cluster, operator processes, status timing, process memory."""

from __future__ import annotations

import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes import client, watch
from prometheus_client.parser import text_string_to_metric_families

from localcluster.build import binary
from localcluster.cluster import LocalCluster
from tests.kube import Kube, find_kubectl, wait_for

HERE = Path(__file__).resolve().parent
GROUP, VERSION, PLURAL = "bench.playbook-operator.dev", "v1alpha1", "benches"


def bench_cluster() -> Kube:
    """KUBECONFIG's cluster when set, else the local control plane named "bench"; with the Bench CRD."""
    if os.environ.get("KUBECONFIG"):
        kube = Kube(Path(os.environ["KUBECONFIG"].split(os.pathsep)[0]), find_kubectl())
    else:
        cluster = LocalCluster("bench")
        cluster.up()
        kube = Kube(cluster.paths.kubeconfig, str(binary("kubectl")))
    kube.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(HERE / "crd.yaml"))
    wait_for("benches served", lambda: kube.kubectl("get", f"{PLURAL}.{GROUP}", "-A", check=False).returncode == 0)
    return kube


def fresh_namespace(kube: Kube, prefix: str) -> str:
    name = f"{prefix}-{int(time.time() * 1000) % 10_000_000}"
    kube.core.create_namespace({"metadata": {"name": name}})
    return name


def delete_namespace(kube: Kube, name: str, timeout: float = 600) -> None:
    """Deletes a namespace and waits until it is gone, so that its objects' deletion (thousands of API
    writes) neither slows nor shows up in the next measurement."""
    kube.core.delete_namespace(name)

    def gone() -> bool:
        try:
            kube.core.read_namespace(name)
        except client.ApiException as exc:
            if exc.status == 404:
                return True
            raise
        return False

    wait_for(f"namespace {name} deleted", gone, timeout=timeout, interval=1)


def _tree(pid: int) -> list[int]:
    """A process and all its descendants."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
                children.setdefault(ppid, []).append(int(entry))
            except (OSError, ValueError, IndexError):
                pass
    found, stack = [], [pid]
    while stack:
        p = stack.pop()
        found.append(p)
        stack.extend(children.get(p, []))
    return found


def tree_memory_mb(pid: int) -> dict[str, float]:
    """Resident (RSS) and proportional (PSS: each shared page divided among the processes sharing it) memory
    of a process and all its descendants, in MB. RSS counts the pages a forkserver shares with its children
    once per process; PSS adds up to what the tree really holds."""
    total = {"Rss": 0, "Pss": 0}
    for p in _tree(pid):
        try:
            with open(f"/proc/{p}/smaps_rollup") as fh:
                for line in fh:
                    key, _, rest = line.partition(":")
                    if key in total:
                        total[key] += int(rest.split()[0])
        except OSError:  # gone meanwhile
            pass
    return {"rss": total["Rss"] / 1024, "pss": total["Pss"] / 1024}


@dataclass
class OperatorRun:
    """One operator process (ours or the peer) watching one namespace."""

    name: str
    cmd: list[str]
    env: dict[str, str]
    cwd: Path
    metrics_port: int
    proc: subprocess.Popen[bytes] | None = None
    log_path: Path = field(default_factory=lambda: Path(tempfile.mkstemp(prefix="bench-op-", suffix=".log")[1]))

    @property
    def artifacts(self) -> Path | None:
        """Where ours keeps the runner's artifacts (its --artifacts-dir); None for the peer."""
        return Path(self.cmd[self.cmd.index("--artifacts-dir") + 1]) if "--artifacts-dir" in self.cmd else None

    def start(self, ready_pattern: str | None = None, timeout: float = 120) -> OperatorRun:
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(self.cmd, env=self.env, cwd=self.cwd, stdout=log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        if ready_pattern:
            wait_for(f"{self.name} ready", lambda: ready_pattern in self.log_path.read_text(errors="replace"),
                     timeout=timeout)
        return self

    def logs(self) -> str:
        return self.log_path.read_text(errors="replace")

    def rss_mb(self) -> float:
        return self.memory_mb()["rss"]

    def memory_mb(self) -> dict[str, float]:
        assert self.proc is not None
        return tree_memory_mb(self.proc.pid)

    def reconciles(self) -> float:
        """Finished reconciles so far, from the operator's /metrics: both expose upstream's
        ``ansible_operator_reconcile_result`` (a gauge there, a counter here), counted once a run ends."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=10) as resp:
            text = resp.read().decode()
        return sum(value for _, value in samples(text, "ansible_operator_reconcile_result"))

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            os.killpg(self.proc.pid, sig)
            self.proc.wait(40)
        except (subprocess.TimeoutExpired, ProcessLookupError):
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait()


def operator_env(kube: Kube, namespace: str | None, extra_env: dict[str, str] | None) -> dict[str, str]:
    """An operator process's environment: the cluster's, watching ``namespace`` (None: all of them)."""
    env = kube.env()
    env.pop("WATCH_NAMESPACE", None)
    if namespace:
        env["WATCH_NAMESPACE"] = namespace
    env.update(extra_env or {})
    env.setdefault("BENCH_RECONCILE_PERIOD", "10h")  # bench/watches.yaml: ${BENCH_RECONCILE_PERIOD}
    return env


def ours(kube: Kube, namespace: str | None, watches: Path, *args: str, executor: str = "warm",
         extra_env: dict[str, str] | None = None) -> OperatorRun:
    env = operator_env(kube, namespace, extra_env)
    port = _free_port()
    cmd = [sys.executable, "-m", "runner", "run", "--watches-file", str(watches),
           "--health-probe-bind-address", "127.0.0.1:0", "--metrics-bind-address", f"127.0.0.1:{port}",
           "--artifacts-dir", tempfile.mkdtemp(prefix="bench-artifacts-"), "--executor", executor, *args]
    return OperatorRun(f"playbook-operator ({executor})", cmd, env, watches.parent, port)


class StatusTracker(threading.Thread):
    """Watches Bench objects and records when each one's latest run result reached its status."""

    def __init__(self, kube: Kube, namespace: str) -> None:
        super().__init__(daemon=True)
        self.kube, self.namespace = kube, namespace
        self.lock = threading.Condition()
        self.completion: dict[str, tuple[str, float]] = {}  # name -> (ansibleResult.completion, seen at)
        self._stop = False

    def run(self) -> None:
        w = watch.Watch()
        rv = None
        while not self._stop:
            try:
                for ev in w.stream(self.kube.custom.list_namespaced_custom_object, GROUP, VERSION, self.namespace,
                                   PLURAL, resource_version=rv, timeout_seconds=60):
                    obj = ev["object"]
                    rv = obj["metadata"]["resourceVersion"]
                    self._record(obj)
                    if self._stop:
                        return
            except client.ApiException:
                rv = None

    def _record(self, obj: dict[str, Any]) -> None:
        now = time.monotonic()
        conds = (obj.get("status") or {}).get("conditions") or []
        running = next((c for c in conds if c.get("type") == "Running"), None)
        ok = any(c.get("type") == "Successful" and c.get("status") == "True" for c in conds)
        if running and ok and running.get("reason") == "Successful" and running.get("ansibleResult"):
            completion = str(running["ansibleResult"].get("completion"))
            name = obj["metadata"]["name"]
            with self.lock:
                if self.completion.get(name, ("", 0))[0] != completion:
                    self.completion[name] = (completion, now)
                    self.lock.notify_all()

    def wait_done(self, names: list[str], after: float, timeout: float = 600) -> float:
        """Monotonic time by which every named object had a run result newer than ``after``."""
        deadline = time.monotonic() + timeout
        with self.lock:
            while True:
                times = [self.completion.get(n, ("", 0.0))[1] for n in names]
                if all(t > after for t in times):
                    return max(times)
                if time.monotonic() > deadline:
                    missing = [n for n, t in zip(names, times, strict=True) if t <= after]
                    raise TimeoutError(f"{len(missing)} objects never finished: {missing[:5]}")
                self.lock.wait(0.5)

    def stop(self) -> None:
        self._stop = True


def create_benches(kube: Kube, namespace: str, names: list[str], value: str = "x") -> float:
    t0 = time.monotonic()
    for n in names:
        kube.custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "Bench", "metadata": {"name": n}, "spec": {"value": value}})
    return t0


def patch_bench(kube: Kube, namespace: str, name: str, spec: dict[str, Any]) -> float:
    t0 = time.monotonic()
    kube.custom.patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name, {"spec": spec})
    return t0


def samples(text: str, family: str) -> list[tuple[dict[str, str], float]]:
    """The samples of one metric family in a Prometheus text exposition (a counter's ``_created`` left out)."""
    return [(s.labels, s.value) for fam in text_string_to_metric_families(text) if fam.name == family
            for s in fam.samples if not s.name.endswith("_created")]


WRITE_VERBS = frozenset({"POST", "PUT", "PATCH", "APPLY", "DELETE", "DELETECOLLECTION"})
# What an operator running the bench role writes: the Bench objects (status, finalizers), the role's
# ConfigMaps and Events. Other resources (Leases renewed by the control plane every few seconds) are noise.
TOUCHED = frozenset({(GROUP, PLURAL), ("", "configmaps"), ("", "events"), ("events.k8s.io", "events")})
# Events through events.k8s.io come from Kubernetes' own components (the scheduler's event series): the operator,
# kopf and operator_sdk.util.k8s_event write core v1 Events. Counted, and named apart ("events.events.k8s.io").
COMPONENT_EVENTS = "events.k8s.io"
WriteKey = tuple[str, str, str]  # (resource[/subresource], verb, HTTP code)


def apiserver_writes(kube: Kube) -> dict[WriteKey, float]:
    """Write requests the API server has served so far to the resources in TOUCHED, from its own
    ``apiserver_request_total`` (every code: a refused or conflicting write is still a request)."""
    text = kube.kubectl("get", "--raw", "/metrics").stdout  # any client version (33.1.0 has no param_serialize)
    counts: dict[WriteKey, float] = {}
    for labels, value in samples(text, "apiserver_request"):
        if labels.get("verb") in WRITE_VERBS and (labels.get("group", ""), labels.get("resource")) in TOUCHED:
            what = labels["resource"] + (f"/{labels['subresource']}" if labels.get("subresource") else "")
            what += f".{labels['group']}" if labels.get("group") == COMPONENT_EVENTS else ""
            what += " (dry run)" if labels.get("dry_run") else ""
            key = (what, labels["verb"], labels.get("code", ""))
            counts[key] = counts.get(key, 0.0) + value
    return counts


def writes_between(before: dict[WriteKey, float], after: dict[WriteKey, float]) -> dict[WriteKey, float]:
    return {k: v - before.get(k, 0.0) for k, v in after.items() if v - before.get(k, 0.0) > 0}


def pct(values: list[float], p: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(p / 100 * (len(s) - 1))))]


def median(values: list[float]) -> float:
    return statistics.median(values)


PEER_VERSION = "v1.42.3"
PEER_PREFIX = Path(os.environ.get("PEER_PREFIX", Path.home() / ".cache" / "peers" / f"ansible-operator-{PEER_VERSION}"))
PEER_BUILD_SCRIPT = Path(__file__).resolve().parents[2] / "shared" / "peers" / "build-ansible-operator.sh"


def build_peer() -> Path:
    """The Go ansible-operator and its Python environment, built once from ../shared/peers."""
    if not (PEER_PREFIX / "bin" / "ansible-operator").exists():
        if not PEER_BUILD_SCRIPT.exists():
            raise SystemExit(f"the peer is not built and {PEER_BUILD_SCRIPT} is missing")
        subprocess.run(["bash", str(PEER_BUILD_SCRIPT), str(PEER_PREFIX)], check=True)
    return PEER_PREFIX


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def peer(kube: Kube, namespace: str | None, watches: Path, *args: str,
         extra_env: dict[str, str] | None = None) -> OperatorRun:
    prefix = build_peer()
    env = operator_env(kube, namespace, extra_env)
    site = next((prefix / "venv" / "lib").glob("python3*/site-packages"))
    env.update({"PATH": f"{prefix / 'venv' / 'bin'}:{env['PATH']}", "ANSIBLE_COLLECTIONS_PATH": str(site),
                "ANSIBLE_GATHERING": "explicit", "HOME": env.get("HOME", "/root")})
    port = _free_port()  # plain HTTP: the peer serves metrics securely only with --metrics-secure
    cmd = [str(prefix / "bin" / "ansible-operator"), "run", "--watches-file", str(watches),
           "--health-probe-bind-address", f"127.0.0.1:{_free_port()}", "--metrics-bind-address", f"127.0.0.1:{port}",
           *args]
    return OperatorRun(f"Go ansible-operator {PEER_VERSION}", cmd, env, watches.parent, port)


PEER_READY = "Starting workers"
OURS_READY = "operator ready"
