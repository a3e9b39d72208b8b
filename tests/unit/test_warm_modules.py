"""Which module commands the warm executor runs in a fork of itself instead of a fresh interpreter."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from runner.execution import warm_child


def _wrapper(tmp_path: Path, name: str, body: str) -> str:
    path = tmp_path / name
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return str(path)


def _pipelined(python: str, env: str = "") -> str:
    # what Ansible's local connection is asked to run for a pipelined module
    return "/bin/sh -c " + shlex.quote(f"{env}{python} && sleep 0")


def test_our_own_python_runs_in_a_fork() -> None:
    assert warm_child._module_invocation(_pipelined(sys.executable, "LANG=C.UTF-8 ")) == {"LANG": "C.UTF-8"}


def test_a_wrapper_that_execs_our_python_runs_in_a_fork(tmp_path: Path) -> None:
    # an image's /usr/local/bin/python3, named by an inventory's ansible_python_interpreter
    python3 = _wrapper(tmp_path, "python3", f'exec {shlex.quote(sys.executable)} "$@"')
    assert warm_child._module_invocation(_pipelined(python3)) == {}
    # the answer is kept (once per interpreter file, not per task), and an edited wrapper is asked again
    assert warm_child._module_invocation(_pipelined(python3)) == {}
    _wrapper(tmp_path, "python3", f'exec {shlex.quote(sys.executable)} -S "$@"  # edited')
    assert warm_child._module_invocation(_pipelined(python3)) is None


def test_a_python_that_would_import_other_code_runs_as_ansible_runs_it(tmp_path: Path) -> None:
    other_path = _wrapper(tmp_path, "python-path", f'PYTHONPATH=/opt/elsewhere exec {shlex.quote(sys.executable)} "$@"')
    no_site = _wrapper(tmp_path, "python-nosite", f'exec {shlex.quote(sys.executable)} -S "$@"')
    warnings = _wrapper(tmp_path, "python-warnings", f'exec {shlex.quote(sys.executable)} -W error "$@"')
    proxy = _wrapper(tmp_path, "python-proxy", f'HTTPS_PROXY=http://127.0.0.1:3128 exec {shlex.quote(sys.executable)} "$@"')
    for python in (other_path, no_site, warnings, proxy, str(tmp_path / "missing")):
        assert warm_child._module_invocation(_pipelined(python)) is None, python


def test_anything_but_a_pipelined_module_runs_as_ansible_runs_it() -> None:
    assert warm_child._module_invocation("/bin/sh -c 'echo hi'") is None
    assert warm_child._module_invocation(f"/bin/sh -c '{sys.executable} /tmp/x.py'") is None
