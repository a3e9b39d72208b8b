"""The operator's image on the real node: an init process reaps what runs leave behind (PID 1 is not the
operator, which reaps only its own children), as the Go operator's image has tini; and the operator sizes
its default concurrency by the container's CPU limit."""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Iterator

import pytest

from localcluster.cluster import LocalCluster
from localcluster.images import OPERATOR_REF
from tests.kube import Kube, wait_for
from tests.operator import FreshKind, fresh_kind
from tests.realnode import NODE_LANE

pytestmark = NODE_LANE

# Commands run in the background by a role (`command: foo &`, an async task, a daemon a script starts) outlive
# the shell that started them: their parent is then the container's PID 1.
ORPHANS_ROLE = """\
- name: Leave processes behind, as a backgrounded command does
  ansible.builtin.shell: "for i in 1 2 3 4 5; do (sleep 1 &); done"
"""


@pytest.fixture
def kind(real: Kube) -> Iterator[FreshKind]:
    fresh = fresh_kind()
    fresh.install(real)
    yield fresh
    fresh.uninstall(real)


def zombies(real: Kube, namespace: str, pod: str) -> list[str]:
    """The container's zombie processes (state Z): pid, name and parent."""
    out = real.kubectl("-n", namespace, "exec", pod, "--", "sh", "-c",
                       "cat /proc/[0-9]*/stat 2>/dev/null; true").stdout
    found = []
    for line in out.splitlines():
        pid, rest = line.split(" ", 1)
        name, fields = rest.rsplit(")", 1)
        if fields.split()[0] == "Z":
            found.append(f"{pid} {name.lstrip('(')} (parent {fields.split()[1]})")
    return found


def test_orphans_of_runs_are_reaped(real: Kube, real_namespace: str, local: LocalCluster, kind: FreshKind) -> None:
    ns, name = real_namespace, f"orphans-{uuid.uuid4().hex[:6]}"
    local.load_images(include_operator=True)
    watches = [{"group": kind.group, "version": kind.version, "kind": kind.kind,
                "role": "/config/roles/orphans", "reconcilePeriod": "1h"}]
    real.core.create_namespaced_config_map(ns, {"metadata": {"name": name}, "data": {
        "watches.yaml": json.dumps(watches), "orphans.yml": ORPHANS_ROLE}})
    real.core.create_namespaced_service_account(ns, {"metadata": {"name": name}})
    real.rbac.create_namespaced_role(ns, {"metadata": {"name": name}, "rules": [
        {"apiGroups": [kind.group], "resources": ["*"], "verbs": ["*"]},
        {"apiGroups": [""], "resources": ["events"], "verbs": ["*"]}]})
    real.rbac.create_namespaced_role_binding(ns, {
        "metadata": {"name": name}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": ns}]})
    image = OPERATOR_REF.removeprefix("docker.io/library/")
    real.core.create_namespaced_pod(ns, {"metadata": {"name": name}, "spec": {
        "serviceAccountName": name, "restartPolicy": "Never",
        "containers": [{"name": "operator", "image": image, "imagePullPolicy": "Never",
                        "args": ["run", "--watches-file=/config/watches.yaml"],
                        "env": [{"name": "WATCH_NAMESPACE", "value": ns}],
                        "resources": {"limits": {"cpu": "500m"}},
                        "volumeMounts": [{"name": "config", "mountPath": "/config"}]}],
        "volumes": [{"name": "config", "configMap": {"name": name, "items": [
            {"key": "watches.yaml", "path": "watches.yaml"},
            {"key": "orphans.yml", "path": "roles/orphans/tasks/main.yml"}]}}]}})
    wait_for("the operator's pod to run", lambda: (real.core.read_namespaced_pod(name, ns).status.phase == "Running"),
             timeout=180)
    objects = kind.objects(real, ns)
    objects.create("leaver", {"round": 1})
    objects.wait_successful("leaver", timeout=120)
    for generation in (2, 3):  # three runs, none in progress when the container is looked at
        objects.patch("leaver", {"spec": {"round": generation}})
        objects.wait_successful("leaver", generation=generation, timeout=60)
    time.sleep(3)  # the last run's sleeps are over
    assert zombies(real, ns, name) == []
    pid1 = real.kubectl("-n", ns, "exec", name, "--", "cat", "/proc/1/cmdline").stdout.split("\0")
    assert "tini" in pid1[0], pid1
    # and a container limited to half a CPU runs one run at a time per kind by default, whatever the node has
    assert re.search(rf"Kind={kind.kind} with role \S+ \(1 workers\)", real.kubectl("-n", ns, "logs", name).stdout)
