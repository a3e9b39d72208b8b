"""The operator_sdk.util modules work with the kubernetes client a Go ansible-operator image ships.

That image (v1.42) pins kubernetes 33.1.0, generated before the client's ``param_serialize``, as this project's
default install does; the ansible-core 2.19 choice has 37.0.2. The playbook runs with each first on its Python
path (and with the venv's own), and writes a status and an Event through both client generations.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from localcluster import paths
from runner.ansible import COLLECTIONS_DIR
from tests.kube import Kube
from tests.operator import Widgets

# The oldest client supported: the Go ansible-operator v1.42 image's (images/ansible-operator/Pipfile), which
# the default install has too; the newest: what the ansible-core 2.19 choice installs
# (constraints-ansible-core-2.19.txt), generated with ApiClient.param_serialize.
OLDEST_CLIENT = ["kubernetes==33.1.0"]
NEWEST_CLIENT = ["kubernetes==37.0.2"]


def _client_dir(pins: list[str]) -> Path | None:
    """A directory holding that client and its dependencies (pip --target), cached per version; None for
    the venv's own."""
    if not pins:
        return None
    target = paths.cache_root() / "pylibs" / "_".join(p.replace("==", "-") for p in pins)
    if not (target / ".complete").exists():
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check",
                        "--target", str(target), *pins], check=True, timeout=300)
        (target / ".complete").touch()
    return target


@pytest.mark.parametrize("pins", [OLDEST_CLIENT, NEWEST_CLIENT, []],
                         ids=["kubernetes-33.1.0", "kubernetes-37.0.2", "venv-client"])
def test_k8s_status_and_k8s_event_work_with_either_client(kube: Kube, namespace: str, widgets: Widgets,
                                                          tmp_path: Path, pins: list[str]) -> None:
    widgets.create("w", {"size": 1})
    extra = _client_dir(pins)
    want = pins[0].split("==")[1] if pins else __import__("kubernetes").__version__
    play = [{"hosts": "localhost", "gather_facts": False, "tasks": [
        {"name": "The client in use", "register": "client", "changed_when": False,
         "ansible.builtin.command": {"argv": ["{{ ansible_playbook_python }}", "-c",
                                              "import kubernetes; print(kubernetes.__version__)"]}},
        {"ansible.builtin.assert": {"that": [f"client.stdout == '{want}'"]}},
        {"name": "Status", "operator_sdk.util.k8s_status": {
            "api_version": "test.playbook-operator.dev/v1alpha1", "kind": "Widget", "name": "w",
            "namespace": namespace, "status": {"message": "written"},
            "conditions": [{"type": "Checked", "status": "True", "reason": "Client", "message": want}]}},
        {"name": "Event", "operator_sdk.util.k8s_event": {
            "name": "w-checked", "namespace": namespace, "reason": "Checked", "message": f"client {want}",
            "involvedObject": {"apiVersion": "test.playbook-operator.dev/v1alpha1", "kind": "Widget",
                               "name": "w", "namespace": namespace}}},
    ]}]
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play))
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(COLLECTIONS_DIR), KUBECONFIG=str(kube.kubeconfig),
               ANSIBLE_LOCALHOST_WARNING="false", ANSIBLE_PYTHON_INTERPRETER=sys.executable)
    if extra:
        env["PYTHONPATH"] = os.pathsep.join([str(extra), *filter(None, [os.environ.get("PYTHONPATH")])])
    run = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", "-c", "local",
                          str(tmp_path / "play.yml")], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]

    status = widgets.get("w")["status"]
    assert status["message"] == "written"
    assert [(c["type"], c["status"], c["message"]) for c in status["conditions"]] == [("Checked", "True", want)]
    event = kube.core.read_namespaced_event("w-checked", namespace)
    assert event.message == f"client {want}" and event.involved_object.name == "w"
