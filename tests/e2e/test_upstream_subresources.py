"""Upstream's subresourcestest (the Go ansible-operator's e2e test operator, see tests/compat) on the real node.

Its playbook starts a busybox pod, runs a command in it (k8s_exec) and reads its log (k8s_log): that needs a
pod that really runs. Its pod names the image `busybox` without a tag, so the kubelet always pulls it; the
node's registry serves it (Debian's busybox-static, localcluster.images), as Docker Hub would. Under each
ansible-core this project supports, as tests/compat runs the other nine files.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from localcluster import images
from localcluster.node import archive_digest
from tests.compat.upstream import ANSIBLE_CORES, NAMESPACE, PROJECT, run_upstream_test, upstream_operator_running
from tests.kube import Kube
from tests.realnode import NODE_LANE
from tests.scripts.loopback import free_port

pytestmark = NODE_LANE

TEST_FILE = "subresourcestest_test.yml"


@pytest.mark.parametrize("ansible_core", ANSIBLE_CORES, ids=lambda v: f"ansible-core-{v}")
def test_upstream_subresourcestest_execs_in_and_reads_the_log_of_a_pod_that_runs(real: Kube, ansible_core: str,
                                                                                 tmp_path: Path) -> None:
    assert (PROJECT / "molecule" / "default" / "tasks" / TEST_FILE).exists()
    (tmp_path / "upstream").mkdir()
    # Ports of its own: the compat group's operator may be serving upstream's on the kwok cluster meanwhile.
    with upstream_operator_running(real, ansible_core, tmp_path / "upstream", health_port=free_port(),
                                   metrics_port=free_port()) as op:
        proc = run_upstream_test(real, op.python, TEST_FILE, tmp_path)
        assert proc.returncode == 0, (f"failed:\n{proc.stdout[-8000:]}\n{proc.stderr[-3000:]}\n"
                                      f"--- operator log ---\n{op.logs()[-8000:]}")
        # the pod's image is what the node's registry serves, pulled by the name the playbook gives
        pod = real.core.read_namespaced_pod("subresources-test-busybox", NAMESPACE)
        assert pod.spec.containers[0].image == "busybox"
        assert pod.spec.containers[0].image_pull_policy == "Always"
        busybox = next(s for s in images.registry_specs() if s.ref == images.BUSYBOX_REF)
        repository = images.BUSYBOX_REF.rsplit(":", 1)[0]
        assert pod.status.container_statuses[0].image_id == f"{repository}@{archive_digest(images.build(busybox))}"
