"""SampleDB's manifests as the roles render them, without a cluster: ansible-playbook (this virtualenv's) renders
the roles' templates with the roles' defaults, the shared filter plugins and the extra-vars the runtime passes,
so that a test checks, and runs, what ships (the ConfigMap's scripts and configuration, the StatefulSet's
environment and probes, the Jobs' pods)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
ROLES = ROOT / "roles"
# The roles whose templates make the servers and the Jobs (defaults loaded in this order, as in the playbook).
TEMPLATE_ROLES = ("common", "upgrade", "provision", "restore", "backup")


def sampledb_vars(name: str = "db", namespace: str = "ns", **spec: Any) -> dict[str, Any]:
    """The extra-vars the runtime gives the playbook for a SampleDB with this spec (CRD defaults filled in)."""
    spec = {"version": "15.18", "replicas": 1, "storage": {"size": "1Gi"}, "deletionPolicy": "Snapshot",
            "backup": {"schedule": "30 0 * * *", "retention": 7, "suspend": False, "storageSize": "2Gi"},
            "upgrade": {"allowMajor": False}, "replication": {"mode": "sync"}, **spec}
    obj = {"apiVersion": "sampledb.example.com/v1alpha1", "kind": "SampleDB",
           "metadata": {"name": name, "namespace": namespace}, "spec": spec, "status": {}}
    return {"ansible_operator_meta": {"name": name, "namespace": namespace},
            "_sampledb_example_com_sampledb": obj, "_sampledb_example_com_sampledb_spec": spec,
            "version": spec["version"], "replicas": spec["replicas"], "storage": spec["storage"],
            "deletion_policy": spec["deletionPolicy"], "backup": spec["backup"], "upgrade": spec["upgrade"],
            "replication": spec["replication"]}


def render(*variants: tuple[list[str], dict[str, Any]]) -> list[dict[str, list[dict[str, Any]]]]:
    """For each (templates, vars): each template (by file name, from any of TEMPLATE_ROLES) rendered with those
    vars over the roles' defaults, and parsed: its YAML documents. One ansible-playbook run, one play per variant.
    The StatefulSet's template needs `sdb_configmap`, which the provision role sets from configmap.yaml.j2: so
    does this."""
    with tempfile.TemporaryDirectory(prefix="sampledb-render-") as tmp:
        work = Path(tmp)
        # A playbook directory whose templates/ and files/ are the roles' (what a role's tasks search).
        (work / "templates").mkdir()
        for role in TEMPLATE_ROLES:
            for template in (ROLES / role / "templates").glob("*.j2"):
                (work / "templates" / template.name).symlink_to(template)
        (work / "files").symlink_to(ROLES / "provision" / "files")
        plays = []
        for i, (templates, variables) in enumerate(variants):
            rendered = {t: "{{ lookup('ansible.builtin.template', " + repr(t) + ") | from_yaml_all | list }}"
                        for t in templates}
            plays.append({
                "name": f"variant {i}", "hosts": "localhost", "gather_facts": False, "connection": "local",
                "vars_files": [str(ROLES / role / "defaults" / "main.yml") for role in TEMPLATE_ROLES],
                # task vars: above the roles' defaults (vars_files), as the runtime's extra-vars are
                "tasks": [{"name": "Render", "ansible.builtin.copy": {
                    "dest": str(work / f"rendered-{i}.json"), "content": "{{ rendered | to_json }}"},
                    "vars": {**variables, "rendered": rendered, "sdb_configmap":
                             "{{ lookup('ansible.builtin.template', 'configmap.yaml.j2') | from_yaml }}"}}],
            })
        (work / "render.yml").write_text(yaml.safe_dump(plays))
        filters = [ROLES / role / "filter_plugins" for role in ("common", *TEMPLATE_ROLES)]
        env = {**os.environ, "ANSIBLE_FILTER_PLUGINS": ":".join(str(d) for d in dict.fromkeys(filters) if d.is_dir()),
               "ANSIBLE_TEST_PLUGINS": str(ROLES / "common" / "test_plugins"), "ANSIBLE_HOME": str(work / ".ansible"),
               "ANSIBLE_LOCAL_TEMP": str(work / ".ansible" / "tmp"), "ANSIBLE_PYTHON_INTERPRETER": sys.executable,
               "ANSIBLE_LOCALHOST_WARNING": "false", "ANSIBLE_INVENTORY_UNPARSED_WARNING": "false",
               "ANSIBLE_NOCOLOR": "1", "ANSIBLE_RETRY_FILES_ENABLED": "false"}
        proc = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,",
                               str(work / "render.yml")], cwd=work, env=env, capture_output=True, text=True, timeout=180)
        if proc.returncode != 0:
            raise AssertionError(f"rendering failed:\n{proc.stdout[-6000:]}\n{proc.stderr[-3000:]}")
        return [json.loads((work / f"rendered-{i}.json").read_text()) for i in range(len(variants))]
