"""The local object store (versitygw beside the node(s)) as the continuous-backup tests use it: the sample's keys, a
database's archive as the store keeps it on this machine, and waits for what the operator reports of it."""

from __future__ import annotations

import json
import time

import yaml

from localcluster.cluster import LocalCluster
from tests.kube import Kube, wait_for
from tests.operator import ROOT
from tests.realnode import POSTGRES_IMAGE, SERVER_RESOURCES, psql_in_server, simple_pod
from tests.sampledb import GROUP, PLURAL, VERSION, get

SAMPLE = ROOT / "deploy" / "samples" / "sampledb-objectstore.yaml"
ENDPOINT = "http://versitygw.objectstore.svc:7070"
STORE = {"endpointURL": ENDPOINT, "bucket": "sampledb", "credentials": {"secretName": "objectstore-keys"}}


def keys_secret(kube: Kube, ns: str) -> None:
    """Only the sample's Secret (the local store's keys)."""
    secret = next(d for d in yaml.safe_load_all(SAMPLE.read_text()) if d["kind"] == "Secret")
    kube.kubectl("-n", ns, "apply", "-f", "-", input=json.dumps(secret))


def one_server(kube: Kube, ns: str, name: str, **spec: object) -> None:
    """A SampleDB of one small server (the proofs' CPU request), ``spec`` over it."""
    kube.custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "SampleDB", "metadata": {"name": name},
        "spec": {"version": "15.18", "replicas": 1, "storage": {"size": "1Gi"}, "deletionPolicy": "Delete",
                 "resources": SERVER_RESOURCES, **spec}})


def condition(kube: Kube, ns: str, name: str, kind: str) -> dict:
    return next((c for c in (get(kube, ns, name).get("status") or {}).get("conditions") or []
                 if c.get("type") == kind), {})


def poke(kube: Kube, ns: str, name: str) -> None:
    """A run now (an annotation change brings a SampleDB back at once), rather than at the reconcile period."""
    kube.kubectl("-n", ns, "annotate", "sdb", name, f"test.example.com/poke={time.monotonic_ns()}", "--overwrite")


def wait_condition(kube: Kube, ns: str, name: str, kind: str, status: str, timeout: float = 180) -> dict:
    def check() -> dict | None:
        found = condition(kube, ns, name, kind)
        if found.get("status") == status:
            return found
        poke(kube, ns, name)
        return None

    return wait_for(f"{name}'s {kind} to be {status}", check, timeout=timeout, interval=5)


def archived_files(cluster: LocalCluster, ns: str, name: str) -> dict[str, tuple[int, int]]:
    """The archive's WAL objects (PostgreSQL 15's), as the store keeps them on this machine: name → (size, mtime in
    ns)."""
    wals = cluster.node.layout.objectstore / "sampledb" / ns / name / "pg15" / "wals"
    return {p.name: (p.stat().st_size, p.stat().st_mtime_ns) for p in wals.rglob("*") if p.is_file()}


def switch_and_archive(kube: Kube, ns: str, pod: str) -> str:
    """Writes, switches to a new segment and waits until the primary archived the one it left; returns its name."""
    segment = psql_in_server(kube, ns, pod, "create table if not exists t (id serial, at timestamptz default now()); "
                                            "insert into t select from generate_series(1, 1000); "
                                            "select pg_walfile_name(pg_switch_wal())")
    wait_for(f"{segment} archived by {pod}", lambda: psql_in_server(
        kube, ns, pod, "select last_archived_wal >= '" + segment + "' from pg_stat_archiver") == "t",
             timeout=120, interval=1)
    return segment


def run_pod(kube: Kube, ns: str, name: str, script: str, secret: str) -> str:
    """A pod of the PostgreSQL image (barman-cloud in it) runs ``script`` with the Secret's keys in its environment."""
    body = simple_pod(name, ["/bin/bash", "-c", script], image=POSTGRES_IMAGE,
                      securityContext={"runAsNonRoot": True, "runAsUser": 999, "runAsGroup": 999})
    body["spec"]["containers"][0]["env"] = [
        {"name": "AWS_ACCESS_KEY_ID", "valueFrom": {"secretKeyRef": {"name": secret, "key": "ACCESS_KEY_ID"}}},
        {"name": "AWS_SECRET_ACCESS_KEY", "valueFrom": {"secretKeyRef": {"name": secret, "key": "ACCESS_SECRET_KEY"}}},
        {"name": "AWS_DEFAULT_REGION", "value": "us-east-1"}]
    kube.core.create_namespaced_pod(ns, body)
    phase = wait_for(f"{name} to finish", lambda: (
        p := kube.core.read_namespaced_pod(name, ns).status.phase) in ("Succeeded", "Failed") and p, timeout=180)
    out = kube.kubectl("-n", ns, "logs", name).stdout
    assert phase == "Succeeded", out
    return out


def segments(files: dict[str, tuple[int, int]]) -> dict[int, list[int]]:
    """The archived WAL segments by timeline: their numbers (log * 256 + segment, 16 MB segments), sorted (a segment's
    .partial, which a promoted standby archives, and a backup's label in it count as that segment)."""
    out: dict[int, set[int]] = {}
    for f in files:
        name = f.split(".")[0]
        if len(name) == 24:
            out.setdefault(int(name[:8], 16), set()).add(int(name[8:16], 16) * 256 + int(name[16:], 16))
    return {tli: sorted(nums) for tli, nums in out.items()}
