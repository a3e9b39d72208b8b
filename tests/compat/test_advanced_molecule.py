"""Upstream's own e2e test operator (the Go ansible-operator's "advanced molecule" sample, v1.42.3) on
`playbook-operator run`, unchanged, under each ansible-core this project supports; its molecule test files
run as upstream's verify.yml runs them, so each asserts exactly what upstream asserts (see tests/compat/upstream.py
for how the image and the Deployment are reproduced).

subresourcestest is in tests/e2e/test_upstream_subresources.py: its busybox pod must really run.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.compat.upstream import (
    ANSIBLE_CORES,
    NAMESPACE,
    PROJECT,
    UpstreamOperator,
    run_upstream_test,
    upstream_operator_running,
)
from tests.kube import Kube

pytestmark = pytest.mark.xdist_group("compat")  # one namespace (osdk-test) and fixed ports: one at a time

UPSTREAM_TESTS = sorted(p.name for p in (PROJECT / "molecule" / "default" / "tasks").glob("*_test.yml")
                        if p.name != "subresourcestest_test.yml")


def test_every_upstream_test_file_is_run() -> None:
    names = {p.name for p in (PROJECT / "molecule" / "default" / "tasks").glob("*_test.yml")}
    assert len(names) == 10 and set(UPSTREAM_TESTS) == names - {"subresourcestest_test.yml"}, names


@pytest.fixture(scope="module", params=ANSIBLE_CORES, ids=lambda v: f"ansible-core-{v}")
def upstream_operator(request: pytest.FixtureRequest, kube: Kube,
                      tmp_path_factory: pytest.TempPathFactory) -> Iterator[UpstreamOperator]:
    with upstream_operator_running(kube, request.param, tmp_path_factory.mktemp(f"upstream-{request.param}")) as op:
        yield op


# What ansible-core 2.19's templating does to upstream's own test operator (README, "The Ansible underneath"):
# the test file, the object it makes, and what the object's Failure condition says. From 2.19 on,
# "{{ (n | int) + 1 }}" in a task's arguments stays an integer, which a ConfigMap's data refuses; 2.18
# renders it as the string the Go ansible-operator's roles expect.
BROKEN_BY_2_19 = {
    "reconciliationtest_test.yml": ("reconciliationtests", "reconciliation-test",
                                    r'Failed to patch object: .*iterations\W+2[,}]'),
}


@pytest.mark.parametrize("test_file", UPSTREAM_TESTS)
def test_upstream_molecule_test(upstream_operator: UpstreamOperator, kube: Kube, test_file: str,
                                tmp_path: Path) -> None:
    proc = run_upstream_test(kube, upstream_operator.python, test_file, tmp_path)
    failure = f"{test_file}:\n{proc.stdout[-8000:]}\n{proc.stderr[-3000:]}\n--- operator log ---\n" \
              f"{upstream_operator.logs()[-8000:]}"
    if upstream_operator.ansible_core == "2.19" and test_file in BROKEN_BY_2_19:
        plural, name, message = BROKEN_BY_2_19[test_file]
        assert proc.returncode != 0, f"passed under ansible-core 2.19 (no longer broken?): {failure}"
        conditions = kube.custom.get_namespaced_custom_object(
            "test.example.com", "v1alpha1", NAMESPACE, plural, name).get("status", {}).get("conditions", [])
        reported = [c.get("message", "") for c in conditions if c["type"] == "Failure" and c["status"] == "True"]
        assert reported and re.search(message, reported[0]), (conditions, failure)
        return
    assert proc.returncode == 0, f"failed: {failure}"
