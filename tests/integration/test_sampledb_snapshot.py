"""deletionPolicy Snapshot on a cluster with the snapshot API: a VolumeSnapshot of each data volume must be
ready before anything is deleted. The API is cluster-wide, so this runs on a cluster of its own (with it
installed, every other Snapshot deletion would wait for snapshots). No CSI driver runs here: the test
plays the snapshot controller's part and marks the snapshots readyToUse."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from localcluster.build import binary
from localcluster.cluster import LocalCluster
from tests.kube import Kube, wait_for
from tests.operator import ROOT, OperatorProcess, install_sampledb_crds, sampledb_watches
from tests.sampledb import GROUP, PLURAL, VERSION, condition, gone, sample

SNAPSHOTS = ("snapshot.storage.k8s.io", "v1", "volumesnapshots")
# The external-snapshotter's VolumeSnapshot CRD, reduced to what the operator uses.
SNAPSHOT_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": "volumesnapshots.snapshot.storage.k8s.io",
                 "annotations": {"api-approved.kubernetes.io": "https://github.com/kubernetes-csi/external-snapshotter/pull/955"}},
    "spec": {"group": "snapshot.storage.k8s.io", "scope": "Namespaced",
             "names": {"kind": "VolumeSnapshot", "plural": "volumesnapshots", "singular": "volumesnapshot",
                       "listKind": "VolumeSnapshotList"},
             "versions": [{"name": "v1", "served": True, "storage": True, "subresources": {"status": {}},
                           "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}}]}}


@pytest.fixture(scope="module")
def snapshot_cluster() -> Iterator[Kube]:
    cluster = LocalCluster(f"snap-{uuid.uuid4().hex[:6]}")
    try:
        cluster.up()
        kube = Kube(cluster.paths.kubeconfig, str(binary("kubectl")))
        kube.kubectl("apply", "-f", "-", input=json.dumps(SNAPSHOT_CRD))
        install_sampledb_crds(kube)
        kube.wait_established("volumesnapshots.snapshot.storage.k8s.io")
        yield kube
    finally:
        cluster.down(purge=True)


def test_snapshot_policy_waits_for_volume_snapshots(snapshot_cluster: Kube, tmp_path: Path) -> None:
    kube, ns = snapshot_cluster, "snap"
    kube.core.create_namespace({"metadata": {"name": ns}})
    op = OperatorProcess(kube, ns, tmp_path, sampledb_watches(), ["--ansible-roles-path", str(ROOT / "roles")]).start()
    try:
        kube.custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, sample("db", replicas=2))
        wait_for("Ready", lambda: kube.custom.get_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "db").get(
            "status", {}).get("phase") == "Ready", timeout=180)
        kube.custom.delete_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "db")

        snaps = wait_for("a snapshot of each data volume", lambda: (items := kube.custom.list_namespaced_custom_object(
            *SNAPSHOTS[:2], ns, SNAPSHOTS[2])["items"]) and len(items) == 2 and items, timeout=120)
        assert sorted(s["spec"]["source"]["persistentVolumeClaimName"] for s in snaps) == ["data-db-0", "data-db-1"]
        # the final backup completes, but nothing goes while the snapshots are not ready
        db = wait_for("the deletion to wait for the snapshots", lambda: (d := kube.custom.get_namespaced_custom_object(
            GROUP, VERSION, ns, PLURAL, "db")) and "(Completed) and the volume snapshots" in condition(
            d, "DeletionBlocked").get("message", "") and d, timeout=120)
        assert db["status"]["phase"] == "Deleting"
        assert {p.metadata.name for p in kube.core.list_namespaced_persistent_volume_claim(ns).items} >= {
            "data-db-0", "data-db-1"}
        for s in snaps:  # the snapshot controller's part
            kube.custom.patch_namespaced_custom_object_status(*SNAPSHOTS[:2], ns, SNAPSHOTS[2], s["metadata"]["name"],
                                                              {"status": {"readyToUse": True}})

        wait_for("the SampleDB to go", lambda: gone(kube, ns, "db"), timeout=120)
        wait_for("the data volumes to go", lambda: not [p for p in kube.core.list_namespaced_persistent_volume_claim(
            ns).items if p.metadata.name.startswith("data-") and not p.metadata.deletion_timestamp], timeout=60)
        # the snapshots outlive the database
        assert len(kube.custom.list_namespaced_custom_object(*SNAPSHOTS[:2], ns, SNAPSHOTS[2])["items"]) == 2
    finally:
        op.stop()
