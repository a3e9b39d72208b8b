"""The rules --required-permissions reads (runner/permissions.py): every verb of a ClusterRole or Role, subresources
apart, wildcards and URLs left out."""

from __future__ import annotations

from pathlib import Path

import pytest

from runner.permissions import Permission, PermissionsFileError, load_permissions

ROOT = Path(__file__).resolve().parents[2]


def test_every_verb_of_every_resource_is_one_permission(tmp_path: Path) -> None:
    f = tmp_path / "role.yaml"
    f.write_text("""
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
rules:
  - apiGroups: [""]
    resources: [pods, pods/exec]
    verbs: [get, create]
  - apiGroups: ["*"]
    resources: [things]
    verbs: [get]
  - nonResourceURLs: [/metrics]
    verbs: [get]
---
kind: ConfigMap
""")
    assert load_permissions(f) == [Permission("", "pods", "", "create"), Permission("", "pods", "", "get"),
                                   Permission("", "pods", "exec", "create"), Permission("", "pods", "exec", "get")]
    assert str(Permission("storage.k8s.io", "storageclasses", "", "list")) == "list storageclasses.storage.k8s.io"
    assert str(Permission("", "pods", "exec", "create")) == "create pods/exec"


def test_a_file_with_no_rule_is_an_error(tmp_path: Path) -> None:
    f = tmp_path / "empty.yaml"
    f.write_text("kind: ConfigMap\n")
    with pytest.raises(PermissionsFileError, match="names no permission"):
        load_permissions(f)
    with pytest.raises(PermissionsFileError, match="could not read"):
        load_permissions(tmp_path / "missing.yaml")


def test_the_sampledb_operators_rbac_grants_what_its_failover_needs() -> None:
    granted = load_permissions(ROOT / "deploy" / "rbac" / "role.yaml")
    assert Permission("", "pods", "exec", "create") in granted
