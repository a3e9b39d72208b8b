"""`make deploy` on the real node: the operator runs in the cluster from the locally built image, as
deploy/rbac's ServiceAccount, elects a leader, and manages a SampleDB end to end: an application writes through
it, a switchover moves the primary, a backup completes, the deletion's finalizer runs."""

from __future__ import annotations

import json

import pytest

from localcluster.cluster import LocalCluster
from tests.kube import Kube, wait_for
from tests.operator import ROOT
from tests.realnode import NODE_LANE, POSTGRES_IMAGE, ClientPod, credentials, psql_in_server, wait_endpoints
from tests.sampledb import GROUP, PLURAL, VERSION, backup, backup_status, get, gone, roles, sample, wait_phase

pytestmark = NODE_LANE
OPERATOR_NS = "sampledb-system"


@pytest.fixture
def operator_image(local: LocalCluster) -> None:
    """What `make deploy` does on the local cluster first: build the image (when changed) and import it."""
    local.load_images(include_operator=True)


def test_the_operator_deployed_in_cluster_manages_a_sampledb(operator_image: None, node_to_itself: None, real: Kube,
                                                             real_namespace: str) -> None:
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
        # an application writes through the primary's Service with the Secret's credentials
        ns, host = real_namespace, f"deployed-primary.{real_namespace}.svc"
        wait_endpoints(real, ns, "deployed-primary", [primary])
        app, creds = ClientPod(real, ns, POSTGRES_IMAGE), credentials(real, ns, "deployed")
        app.sql(host, creds, "app", "create table t (id int primary key); insert into t select generate_series(1, 100)")
        # a switchover on request, done by the operator in the pod with the ServiceAccount's permissions
        wanted = wait_for("a replica", lambda: next((p for p, r in roles(real, ns, "deployed").items()
                                                     if r == "replica"), None))
        real.custom.patch_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "deployed", {"metadata": {
            "annotations": {"sampledb.example.com/switchover-to": wanted}}})
        wait_for(f"{wanted} to be the primary", lambda: (st := get(real, ns, "deployed")["status"]).get(
            "currentPrimary") == wanted and st.get("phase") == "Ready", timeout=300, interval=1)
        wait_endpoints(real, ns, "deployed-primary", [wanted])
        assert app.sql(host, creds, "app", "insert into t values (101); select count(*) from t")[1] == "101"
        # and a backup, by the backup role (another kind, another Job)
        backup(real, ns, "b", database="deployed")
        st = wait_for("the backup to finish", lambda: (s := backup_status(real, ns, "b")).get("phase") in (
            "Completed", "Failed") and s, timeout=300)
        assert st["phase"] == "Completed", st
        logs = real.kubectl("-n", OPERATOR_NS, "logs", leader, check=False).stdout
        # every 403 from the API carries the reason Forbidden; a bare "403" also matches log timestamps' milliseconds
        assert "run end: SampleDB " in logs and "run end: SampleDBBackup " in logs and "Forbidden" not in logs

        real.custom.delete_namespaced_custom_object(GROUP, VERSION, real_namespace, PLURAL, "deployed")
        wait_for("the SampleDB to be deleted (its finalizer ran in the cluster)",
                 lambda: gone(real, real_namespace, "deployed"), timeout=300)
    finally:
        removed = real.kubectl("-n", OPERATOR_NS, "delete", "deployment", "sampledb-operator", "--ignore-not-found",
                               "--wait=true", "--timeout=90s", check=False, timeout=120)
    # Checked once the test itself passed (a failure here must not hide why it failed): the operator is gone, so that
    # it manages no later test's SampleDBs; its Lease goes too. deploy/rbac, the CRDs and the namespace stay: the
    # other e2e tests' operators use them.
    assert removed.returncode == 0, removed.stderr
    wait_for("the operator's pods to be gone", lambda: not real.core.list_namespaced_pod(
        OPERATOR_NS, label_selector="app.kubernetes.io/name=sampledb-operator").items, timeout=120)
    real.kubectl("-n", OPERATOR_NS, "delete", "lease", "sampledb-operator", "--ignore-not-found")
