"""`make deploy` on the real node: the operator runs in the cluster from the locally built image, as
deploy/rbac's ServiceAccount, elects a leader, and manages a SampleDB end to end."""

from __future__ import annotations

import json

import pytest

from localcluster.cluster import LocalCluster
from tests.kube import Kube, wait_for
from tests.operator import ROOT
from tests.realnode import psql_in_server
from tests.sampledb import GROUP, PLURAL, VERSION, gone, sample, wait_phase

pytestmark = pytest.mark.xdist_group("e2e")
OPERATOR_NS = "sampledb-system"


def test_the_operator_deployed_in_cluster_manages_a_sampledb(real: Kube, real_namespace: str,
                                                             local: LocalCluster) -> None:
    # what `make deploy` does on the local cluster: build (when changed) and import the image, apply
    local.load_images(include_operator=True)
    real.kubectl("apply", "--server-side", "--force-conflicts", "-k", str(ROOT / "deploy" / "default"))
    try:
        real.kubectl("-n", OPERATOR_NS, "rollout", "status", "deployment/sampledb-operator", "--timeout=240s",
                     timeout=260)
        pods = real.core.list_namespaced_pod(OPERATOR_NS, label_selector="app.kubernetes.io/name=sampledb-operator")
        assert {p.spec.service_account_name for p in pods.items} == {"sampledb-operator"}
        assert all(p.spec.containers[0].image == "sampledb-operator:latest" for p in pods.items)
        lease = wait_for("a leader", lambda: json.loads(real.kubectl(
            "-n", OPERATOR_NS, "get", "lease", "sampledb-operator", "-o", "json", check=False).stdout or "{}")
            .get("spec", {}).get("holderIdentity"), timeout=120)
        leader = lease.split("_")[0]  # "<pod>_<uid>", as controller-runtime names holders
        assert leader in {p.metadata.name for p in pods.items}

        real.custom.create_namespaced_custom_object(GROUP, VERSION, real_namespace, PLURAL,
                                                    sample("deployed", replicas=2))
        db = wait_phase(real, real_namespace, "deployed", timeout=420)
        primary = db["status"]["currentPrimary"]
        assert psql_in_server(real, real_namespace, primary, "select pg_is_in_recovery()") == "f"
        logs = real.kubectl("-n", OPERATOR_NS, "logs", leader, check=False).stdout
        # every 403 from the API carries the reason Forbidden; a bare "403" also matches log timestamps' milliseconds
        assert "run end: SampleDB" in logs and "Forbidden" not in logs

        real.custom.delete_namespaced_custom_object(GROUP, VERSION, real_namespace, PLURAL, "deployed")
        wait_for("the SampleDB to be deleted (its finalizer ran in the cluster)",
                 lambda: gone(real, real_namespace, "deployed"), timeout=300)
    finally:
        real.kubectl("-n", OPERATOR_NS, "delete", "deployment", "sampledb-operator", "--ignore-not-found",
                     "--wait=true", "--timeout=90s", check=False, timeout=120)
