"""Runs `playbook-operator run` as a real process against the test cluster, for integration tests."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.kube import Kube, wait_for

TESTOP = Path(__file__).resolve().parent / "testop"
ROOT = Path(__file__).resolve().parents[1]
# kwok's stage delays, shortened for the database pods and Jobs
FAST_PODS = {f"{stage}.stage.kwok.x-k8s.io/{k}": "0s" for stage in ("pod-create", "pod-ready", "pod-complete")
             for k in ("delay", "jitter-delay")}
WIDGET_GROUP, WIDGET_VERSION, WIDGETS = "test.playbook-operator.dev", "v1alpha1", "widgets"


def widget_watch(**fields: Any) -> dict[str, Any]:
    entry: dict[str, Any] = {"version": WIDGET_VERSION, "group": WIDGET_GROUP, "kind": "Widget",
                             "role": str(TESTOP / "roles" / "widget")}
    entry.update(fields)
    return entry


def sampledb_watches(*, nodes: bool = False, **extra_vars: Any) -> list[dict[str, Any]]:
    """This repository's watches.yaml (the SampleDB operator), with absolute playbook paths, kwok's delays
    shortened, progress checked every second, and ``extra_vars`` as watch vars of every kind. Its watch of Nodes
    only with ``nodes``: the clusters' nodes are shared by every test, and a drain is what only some of them do."""
    watches = [w for w in yaml.safe_load((ROOT / "watches.yaml").read_text()) if nodes or w["kind"] != "Node"]
    for w in watches:
        if w.get("playbook"):
            w["playbook"] = str(ROOT / w["playbook"])
        w["vars"] = {**w.get("vars", {}), "pod_extra_annotations": FAST_PODS, "backup_pod_extra_annotations": FAST_PODS,
                     "progress_requeue": "1s", "health_requeue": "1s", "final_backup_requeue": "1s", **extra_vars}
    return watches


def install_sampledb_crds(kube: Kube) -> None:
    kube.kubectl("apply", "--server-side", "--force-conflicts", "-k", str(ROOT / "deploy" / "crd"))
    kube.wait_established("sampledbs.sampledb.example.com", "sampledbbackups.sampledb.example.com")


@dataclass
class OperatorProcess:
    kube: Kube
    namespace: str
    workdir: Path
    watches: list[dict[str, Any]]
    args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    proc: subprocess.Popen[bytes] | None = None
    name: str = "operator"

    @property
    def log_path(self) -> Path:
        return self.workdir / f"{self.name}.log"

    @property
    def artifacts(self) -> Path:
        return self.workdir / f"{self.name}-artifacts"

    def start(self, wait: bool = True) -> OperatorProcess:
        self.workdir.mkdir(parents=True, exist_ok=True)
        watches_file = self.workdir / "watches.yaml"
        watches_file.write_text(yaml.safe_dump(self.watches))
        env = self.kube.env()
        env.update({"WATCH_NAMESPACE": self.namespace, "PYTHONUNBUFFERED": "1"})
        env.update(self.env)
        cmd = [sys.executable, "-m", "runner", "run", "--watches-file", str(watches_file),
               "--health-probe-bind-address", "127.0.0.1:0", "--metrics-bind-address", "127.0.0.1:0",
               "--artifacts-dir", str(self.artifacts), "--retry-backoff-max", "4s", *self.args]
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(cmd, cwd=self.workdir, env=env, stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        if wait:
            self.wait_for_log("operator ready", timeout=60)
        return self

    def logs(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def wait_for_log(self, pattern: str, timeout: float = 60, count: int = 1) -> str:
        def found() -> str | None:
            if self.proc is not None and self.proc.poll() is not None:
                raise AssertionError(f"operator exited with {self.proc.returncode}:\n{self.logs()[-5000:]}")
            text = self.logs()
            return text if len(re.findall(pattern, text)) >= count else None

        try:
            return wait_for(f"{pattern!r} x{count} in the operator log", found, timeout=timeout)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n--- operator log ---\n{self.logs()[-5000:]}") from None

    def runs(self, name: str | None = None) -> list[str]:
        pat = r"(?:run|finalizer) end: Widget [^ ]*" + (re.escape(f"/{name} ") if name else "")
        return re.findall(pat + r".*", self.logs())

    def port(self, what: str) -> int:
        m = re.search(rf"serving {what} on [0-9.]+:(\d+)", self.logs())
        assert m, f"no {what} port in the log"
        return int(m.group(1))

    def http_get(self, path: str, what: str = "health probes") -> tuple[int, str]:
        url = f"http://127.0.0.1:{self.port(what)}{path}"
        try:
            with urllib.request.urlopen(url, timeout=5) as resp:
                return resp.status, resp.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 40) -> int | None:
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else None
        self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            return self.proc.wait()

    def kill_group(self) -> None:
        if self.proc is not None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait()


def session_processes(sid: int) -> list[int]:
    """Every process of a session: an operator started in its own (start_new_session), its forkserver, its runs
    (each in a process group of its own) and their task workers."""
    pids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == sid:  # after the command: state, ppid, pgrp, session
            pids.append(int(stat.parent.name))
    return pids


class CustomObjects:
    """Objects of one custom kind, in one namespace (None: a cluster-scoped kind)."""

    def __init__(self, kube: Kube, group: str, version: str, plural: str, kind: str, namespace: str | None) -> None:
        self.kube, self.group, self.version, self.plural, self.kind = kube, group, version, plural, kind
        self.namespace = namespace

    def _call(self, verb: str, *args: Any, subresource: str = "") -> Any:
        scope = "namespaced" if self.namespace is not None else "cluster"
        where = (self.namespace,) if self.namespace is not None else ()
        method = getattr(self.kube.custom, f"{verb}_{scope}_custom_object{subresource}")
        return method(self.group, self.version, *where, self.plural, *args)

    def create(self, name: str, spec: dict[str, Any], labels: dict[str, str] | None = None,
               annotations: dict[str, str] | None = None) -> dict[str, Any]:
        body = {"apiVersion": f"{self.group}/{self.version}", "kind": self.kind,
                "metadata": {"name": name, "labels": labels or {}, "annotations": annotations or {}}, "spec": spec}
        return self._call("create", body)

    def get(self, name: str) -> dict[str, Any]:
        return self._call("get", name)

    def patch(self, name: str, body: dict[str, Any]) -> dict[str, Any]:
        return self._call("patch", name, body)

    def patch_status(self, name: str, body: dict[str, Any]) -> dict[str, Any]:
        return self._call("patch", name, body, subresource="_status")

    def delete(self, name: str) -> None:
        self._call("delete", name)

    def exists(self, name: str) -> bool:
        from kubernetes.client import ApiException

        try:
            self.get(name)
            return True
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise

    def condition(self, name: str, ctype: str) -> dict[str, Any] | None:
        conds = (self.get(name).get("status") or {}).get("conditions") or []
        return next((c for c in conds if c.get("type") == ctype), None)

    def wait_condition(self, name: str, ctype: str, status: str = "True", timeout: float = 60,
                       generation: int | None = None) -> dict[str, Any]:
        def check() -> dict[str, Any] | None:
            obj = self.get(name)
            st = obj.get("status") or {}
            if generation is not None and st.get("observedGeneration") != generation:
                return None
            c = next((c for c in st.get("conditions") or [] if c.get("type") == ctype), None)
            return obj if c and c.get("status") == status else None

        return wait_for(f"{ctype}={status} on {self.kind} {name}", check, timeout=timeout)

    def wait_successful(self, name: str, generation: int | None = None, timeout: float = 60) -> dict[str, Any]:
        return self.wait_condition(name, "Successful", "True", timeout, generation)


class Widgets(CustomObjects):
    """The test kind, in one namespace."""

    def __init__(self, kube: Kube, namespace: str) -> None:
        super().__init__(kube, WIDGET_GROUP, WIDGET_VERSION, WIDGETS, "Widget", namespace)


@dataclass(frozen=True)
class FreshKind:
    """A kind no operator has seen yet: its own group, its CRD installed by ``install``."""

    group: str
    scope: str  # Namespaced or Cluster
    kind: str = "Gizmo"
    plural: str = "gizmos"
    version: str = "v1"

    @property
    def crd_name(self) -> str:
        return f"{self.plural}.{self.group}"

    def crd(self) -> dict[str, Any]:
        schema = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
        return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                "metadata": {"name": self.crd_name},
                "spec": {"group": self.group, "scope": self.scope,
                         "names": {"plural": self.plural, "singular": self.kind.lower(), "kind": self.kind},
                         "versions": [{"name": self.version, "served": True, "storage": True,
                                       "subresources": {"status": {}},
                                       "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                                           "spec": schema, "status": schema}}}}]}}

    def install(self, kube: Kube, wait: bool = True) -> None:
        kube.ext.create_custom_resource_definition(self.crd())
        if wait:  # as `make install` waits for it
            kube.wait_established(self.crd_name)

    def uninstall(self, kube: Kube) -> None:
        kube.kubectl("delete", "--ignore-not-found", "--wait=false", f"crd/{self.crd_name}")

    def watch(self, **fields: Any) -> dict[str, Any]:
        """A watches.yaml entry for this kind, run by the gizmo role."""
        return {"version": self.version, "group": self.group, "kind": self.kind,
                "role": str(TESTOP / "roles" / "gizmo"), **fields}

    def objects(self, kube: Kube, namespace: str | None) -> CustomObjects:
        return CustomObjects(kube, self.group, self.version, self.plural, self.kind,
                             namespace if self.scope == "Namespaced" else None)


# What an operator of a fresh kind needs besides access to that kind: the role's ConfigMaps, Events.
OPERATOR_BASICS = [
    {"apiGroups": [""], "resources": ["configmaps", "events"], "verbs": ["*"]},
    {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["*"]},
]


def kind_rules(group: str) -> list[dict[str, Any]]:
    return [{"apiGroups": [group], "resources": ["*"], "verbs": ["*"]}]


def fresh_kind(scope: str = "Namespaced") -> FreshKind:
    return FreshKind(f"g{uuid.uuid4().hex[:8]}.test.playbook-operator.dev", scope)


def stop_all(ops: list[OperatorProcess], request: Any) -> None:
    """Stops the test's operators; shows the end of their logs when the test failed."""
    for op in ops:
        op.stop()
    failed = getattr(request.node, "rep_call", None)
    if failed is not None and failed.failed:
        for op in ops:
            print(f"\n--- {op.name} log ({op.log_path}) ---\n{op.logs()[-12000:]}")
