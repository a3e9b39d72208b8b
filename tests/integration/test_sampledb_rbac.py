"""deploy/rbac is enough, and no more: the operator runs with its ServiceAccount's token (not the admin's)
and converges and deletes a SampleDB; a verb the ClusterRole does not grant is refused."""

from __future__ import annotations

import json
import re
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.kube import Kube, wait_for
from tests.operator import ROOT, OperatorProcess, sampledb_watches
from tests.sampledb import GROUP, PLURAL, VERSION, backup_named, backup_status, sample, wait_phase


@pytest.fixture
def rbac(kube: Kube, namespace: str, request: pytest.FixtureRequest) -> Iterator[str]:
    """deploy/rbac as kustomize renders it, with the ServiceAccount in the test's namespace and the cluster-wide
    objects renamed for this test (and deleted after it); yields the ServiceAccount's name. A test may leave rules
    out (indirect parametrization: a list of resources whose rules are dropped)."""
    suffix = uuid.uuid4().hex[:6]
    docs = list(yaml.safe_load_all(kube.kubectl("kustomize", str(ROOT / "deploy" / "rbac")).stdout))
    for d in docs:
        if d["kind"] == "ClusterRole":
            d["rules"] = [r for r in d["rules"] if not set(r["resources"]) & set(getattr(request, "param", []))]
    sa = next(d for d in docs if d["kind"] == "ServiceAccount")["metadata"]["name"]
    for d in docs:
        if d["kind"] in ("ClusterRole", "ClusterRoleBinding"):
            d["metadata"]["name"] += f"-{suffix}"
        else:
            d["metadata"]["namespace"] = namespace
        if d["kind"] == "ClusterRoleBinding":
            d["roleRef"]["name"] += f"-{suffix}"
        for s in d.get("subjects", []):
            s["namespace"] = namespace
    rendered = "\n---\n".join(json.dumps(d) for d in docs)
    kube.kubectl("apply", "-f", "-", input=rendered)
    yield sa
    kube.kubectl("delete", "--ignore-not-found", "-f", "-", input=rendered)


def sa_kubeconfig(kube: Kube, namespace: str, sa: str, path: Path) -> Path:
    token = kube.kubectl("-n", namespace, "create", "token", sa, "--duration", "1h").stdout.strip()
    admin = yaml.safe_load(kube.kubeconfig.read_text())
    cluster = admin["clusters"][0]
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "clusters": [cluster],
        "users": [{"name": sa, "user": {"token": token}}],
        "contexts": [{"name": sa, "context": {"cluster": cluster["name"], "user": sa, "namespace": namespace}}],
        "current-context": sa}))
    return path


def test_the_operator_runs_on_its_service_account(kube: Kube, namespace: str, rbac: str, sampledb_operators,
                                                 tmp_path: Path) -> None:
    sa = rbac
    config = str(sa_kubeconfig(kube, namespace, sa, tmp_path / "sa-kubeconfig"))
    # as the Deployment runs it: leader election on, in the operator's namespace
    op = sampledb_operators("--leader-elect", "--leader-election-id", "sampledb-operator",
                            "--required-permissions", str(ROOT / "deploy" / "rbac" / "role.yaml"),
                            env={"KUBECONFIG": config, "K8S_AUTH_KUBECONFIG": config, "POD_NAMESPACE": namespace})
    assert "every permission in" in op.logs()
    kube.custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, sample("db", replicas=2))
    db = wait_phase(kube, namespace, "db")
    assert db["status"]["currentPrimary"]
    # and the finalizer: a final backup, the backups kept, the servers and their volumes deleted
    kube.custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "db")
    wait_for("the final backup", lambda: backup_status(kube, namespace, backup_named(kube, namespace, "db", "Final") or "none")
             .get("phase") == "Completed",
             timeout=120)
    wait_for("the SampleDB to go", lambda: not kube.custom.list_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL)["items"], timeout=120)
    # (a status 403, not the digits of a port such as 127.0.0.1:40391 or a timestamp's milliseconds such as
    # 08:19:53,403, each of which failed this once)
    refusals = [ln for ln in op.logs().splitlines() if "Forbidden" in ln or re.search(r"(?<![\d.:,])403(?!\d)", ln)]
    assert not refusals, refusals

    # what the ClusterRole does not grant is refused: the roles make a Role for each database's servers, never a
    # ClusterRole
    refused = subprocess.run([kube.kubectl_path, f"--kubeconfig={config}", "create", "clusterrole", "anything",
                              "--verb=get", "--resource=pods"], capture_output=True, text=True, timeout=60)
    assert refused.returncode != 0
    assert (f'User "system:serviceaccount:{namespace}:{sa}" cannot create resource "clusterroles"'
            in refused.stderr), refused.stderr


@pytest.mark.parametrize("rbac", [["pods/exec", "storageclasses"]], indirect=True)
def test_an_operator_without_a_permission_its_roles_use_stops_at_start_naming_it(
        kube: Kube, namespace: str, rbac: str, sampledb_crds: None, tmp_path: Path) -> None:
    """deploy/rbac without pods/exec (a failover could not read the replicas' WAL positions) or storageclasses: the
    operator asks the API server for every verb of its ClusterRole at start-up and stops, naming each one missing."""
    config = str(sa_kubeconfig(kube, namespace, rbac, tmp_path / "sa-kubeconfig"))
    op = OperatorProcess(kube, namespace, tmp_path, sampledb_watches(nodes=True),
                         ["--ansible-roles-path", str(ROOT / "roles"),
                          "--required-permissions", str(ROOT / "deploy" / "rbac" / "role.yaml")],
                         {"KUBECONFIG": config, "K8S_AUTH_KUBECONFIG": config})
    op.start(wait=False)
    assert op.proc is not None and op.proc.wait(60) == 1
    errors = [ln for ln in op.logs().splitlines() if " ERROR " in ln]
    assert len(errors) == 1, op.logs()[-3000:]
    for missing in ("create pods/exec", "get pods/exec", "get storageclasses.storage.k8s.io",
                    "list storageclasses.storage.k8s.io"):
        assert missing in errors[0], errors[0]
    assert "run start" not in op.logs()
