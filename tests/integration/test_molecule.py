"""The molecule scenarios (molecule/<scenario>/), each run as `molecule test -s <scenario>` against the
session's cluster, in a namespace of its own so that xdist can run them side by side."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.kube import Kube
from tests.operator import ROOT

SCENARIOS = sorted(p.parent.name for p in (ROOT / "molecule").glob("*/molecule.yml"))


def test_every_scenario_is_collected() -> None:
    assert {"default", "backup", "upgrade", "failover", "delete"} <= set(SCENARIOS), SCENARIOS


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_molecule_scenario(kube: Kube, scenario: str, tmp_path: Path) -> None:
    bin_dir = str(Path(sys.executable).parent)  # molecule calls ansible-playbook and ansible-config by name
    env = {**os.environ, "KUBECONFIG": str(kube.kubeconfig), "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
           "MOLECULE_NAMESPACE": f"molecule-{scenario}-{uuid.uuid4().hex[:6]}", "ANSIBLE_FORCE_COLOR": "0",
           "PY_COLORS": "0", "NO_COLOR": "1",
           # Molecule keeps a scenario's state (e.g. "prepared") under ~/.ansible/tmp, keyed by the checkout's
           # directory name only: a run interrupted in any checkout of that name made the next one skip
           # prepare. Each run starts from a state of its own.
           "MOLECULE_EPHEMERAL_DIRECTORY": str(tmp_path / "molecule-state")}
    started = time.monotonic()
    proc = subprocess.run([f"{bin_dir}/molecule", "test", "-s", scenario], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=1500)
    print(f"\nmolecule test -s {scenario}: exit {proc.returncode} in {time.monotonic() - started:.0f} s")
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-12000:]
