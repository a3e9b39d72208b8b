"""A real Prometheus for the monitoring tests: Debian bookworm's `prometheus` package (it ships promtool),
unpacked once into the cache (keyed by the package version), run on loopback with a throw-away data directory."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from localcluster import paths
from tests.kube import wait_for
from tests.scripts.loopback import free_port

PROMETHEUS_DEB = "2.42.0+ds-5+deb12u1"


def binaries() -> tuple[Path, Path]:
    """(prometheus, promtool) from the Debian package, fetched with apt-get download on first use."""
    home = paths.cache_root() / f"prometheus-{PROMETHEUS_DEB}"
    prometheus, promtool = home / "usr/bin/prometheus", home / "usr/bin/promtool"
    if prometheus.exists() and promtool.exists():
        return prometheus, promtool
    home.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=home.parent, prefix=".prometheus-") as tmp:
        get = ["apt-get", "download", "-q", f"prometheus={PROMETHEUS_DEB}"]
        if subprocess.run(get, cwd=tmp, capture_output=True).returncode != 0:
            # a fresh machine's package lists may not have it yet
            subprocess.run(["apt-get", "update", "-qq"], check=True, capture_output=True)
            done = subprocess.run(get, cwd=tmp, capture_output=True, text=True)
            if done.returncode != 0:
                raise RuntimeError(f"apt-get download prometheus={PROMETHEUS_DEB} failed: {done.stderr.strip()}")
        deb = next(Path(tmp).glob("prometheus_*.deb"))
        tree = Path(tmp) / "tree"
        subprocess.run(["dpkg-deb", "-x", str(deb), str(tree)], check=True)
        shutil.rmtree(home, ignore_errors=True)
        os.replace(tree, home)
    return prometheus, promtool


def _meta(name: str) -> str:
    return re.sub(r"[^a-zA-Z0-9_]", "_", name)


def pod_target_groups(pods: list[Any]) -> list[dict[str, Any]]:
    """What Prometheus's kubernetes_sd (role: pod) gives for these pods (kubernetes client objects): a target per
    container port with the __meta_kubernetes_pod_* labels. Debian's Prometheus is built without Kubernetes
    discovery, so the tests hand it these through file_sd, and the relabelling that follows is the real one."""
    groups = []
    for pod in pods:
        if not pod.status.pod_ip or pod.metadata.deletion_timestamp:
            continue
        common = {"__meta_kubernetes_namespace": pod.metadata.namespace,
                  "__meta_kubernetes_pod_name": pod.metadata.name,
                  "__meta_kubernetes_pod_ip": pod.status.pod_ip}
        common.update({f"__meta_kubernetes_pod_label_{_meta(k)}": v for k, v in (pod.metadata.labels or {}).items()})
        common.update({f"__meta_kubernetes_pod_annotation_{_meta(k)}": v
                       for k, v in (pod.metadata.annotations or {}).items()})
        for c in pod.spec.containers:
            for port in c.ports or []:
                groups.append({"targets": [f"{pod.status.pod_ip}:{port.container_port}"], "labels": {
                    **common, "__meta_kubernetes_pod_container_name": c.name,
                    "__meta_kubernetes_pod_container_port_name": port.name or "",
                    "__meta_kubernetes_pod_container_port_number": str(port.container_port)}})
    return groups


@dataclass
class Prometheus:
    """One Prometheus server scraping what ``scrape_configs`` say, every ``interval``."""

    workdir: Path
    scrape_configs: list[dict[str, Any]]
    interval: str = "5s"
    port: int = 0
    proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Prometheus:
        prometheus, _ = binaries()
        self.port = self.port or free_port()
        config = self.workdir / "prometheus.yml"
        config.write_text(yaml.safe_dump({
            "global": {"scrape_interval": self.interval}, "scrape_configs": self.scrape_configs}))
        with open(self.workdir / "prometheus.log", "wb") as log:
            self.proc = subprocess.Popen(
                [str(prometheus), f"--config.file={config}", f"--storage.tsdb.path={self.workdir / 'data'}",
                 f"--web.listen-address=127.0.0.1:{self.port}"],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

        def ready() -> bool:
            if self.proc.poll() is not None:
                raise AssertionError(f"prometheus exited: {self.log()[-2000:]}")
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2):
                return True

        wait_for("prometheus to be ready", ready, timeout=60, interval=0.5)
        return self

    def log(self) -> str:
        return (self.workdir / "prometheus.log").read_text(errors="replace")

    def api(self, path: str, **params: str) -> Any:
        url = f"{self.url}/api/v1/{path}" + ("?" + urllib.parse.urlencode(params) if params else "")
        with urllib.request.urlopen(url, timeout=10) as resp:
            body = json.load(resp)
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """The instant vector ``expr`` gives now."""
        return self.api("query", query=expr)["result"]

    def targets(self) -> list[dict[str, Any]]:
        return self.api("targets")["activeTargets"]

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
