"""Ansible's housekeeping commands on the local connection (a task's remote tmp directory made and removed,
`~` expanded), done by the warm executor's task worker itself, have the shell's effect and output; what
the shell would expand, and any error, is left to the shell."""

from __future__ import annotations

import asyncio
import getpass
import os
import shlex
import stat
import subprocess
from pathlib import Path

import pytest
from ansible.plugins.loader import shell_loader

from runner.execution import warm_shell
from runner.execution.base import RunRequest
from runner.execution.warm import WarmExecutor


@pytest.fixture
def sh(monkeypatch: pytest.MonkeyPatch):
    for name in ("mkdtemp", "expand_user", "remove"):
        monkeypatch.setattr(warm_shell.ShellBase, name, getattr(warm_shell.ShellBase, name))
    warm_shell.install()
    shell = shell_loader.get("sh")
    shell.set_options()
    return shell


def _as_run(cmd: str) -> str:
    """As ActionBase._low_level_execute_command hands it to the connection."""
    return "/bin/sh -c " + shlex.quote(cmd + " && sleep 0")


def _by_shell(cmd: str) -> tuple[int, bytes, bytes]:
    proc = subprocess.run(_as_run(cmd), shell=True, capture_output=True)
    return proc.returncode, proc.stdout, proc.stderr


def _modes(top: Path) -> list[tuple[str, int]]:
    return [(str(p.relative_to(top)), stat.S_IMODE(p.stat().st_mode)) for p in sorted(top.rglob("*"))]


@pytest.mark.parametrize("parent_mode", [0o755, 0o2775])  # a setgid parent's bit is inherited, as by mkdir
def test_a_tmp_directory_as_the_shell_makes_it(sh, tmp_path: Path, parent_mode: int) -> None:
    tmp_path.chmod(parent_mode)
    for who in ("shell", "here"):
        base = tmp_path / who / "remote" / "tmp"
        cmd = sh.mkdtemp(basefile="ansible-tmp-1.2-3-4", tmpdir=str(base))
        done = warm_shell.run_recorded(_as_run(cmd)) if who == "here" else _by_shell(cmd)
        assert done == (0, f"ansible-tmp-1.2-3-4={base}/ansible-tmp-1.2-3-4\n".encode(), b"")
    assert _modes(tmp_path / "here") == _modes(tmp_path / "shell")
    assert _modes(tmp_path / "here")[-1] == ("remote/tmp/ansible-tmp-1.2-3-4", 0o700 | (parent_mode & stat.S_ISGID))
    # once only: the same command again is the shell's (and fails there, as the directory exists)
    assert warm_shell.run_recorded(_as_run(cmd)) is None


def test_removed_as_rm_removes_it(sh, tmp_path: Path) -> None:
    top = tmp_path / "ansible-tmp-1-2-3"
    (top / "inner").mkdir(parents=True)
    (top / "inner" / "AnsiballZ_x.py").write_text("x")
    cmd = sh.remove(str(top), recurse=True)
    assert warm_shell.run_recorded(_as_run(cmd)) == (0, b"", b"")
    assert not top.exists()
    assert warm_shell.run_recorded(_as_run(sh.remove(str(top), recurse=True))) == (0, b"", b"")  # rm -f


def test_home_as_the_shell_expands_it(sh) -> None:
    """As ActionBase._remote_expand_user asks it on the local connection: ~ and the user's name."""
    cmd = sh.expand_user("~" + getpass.getuser())
    assert warm_shell.run_recorded(_as_run(cmd)) == _by_shell(cmd)


@pytest.mark.parametrize("make", [
    lambda sh, tmp: sh.mkdtemp(basefile="b", tmpdir="$HOME/.ansible/tmp"),  # the shell expands it
    lambda sh, tmp: sh.mkdtemp(basefile="b", tmpdir=str(tmp), system=True),
    lambda sh, tmp: sh.mkdtemp(basefile="b", tmpdir=str(tmp / "a file" / "x")),
    lambda sh, tmp: sh.expand_user("~"),  # $HOME, which sh prints as it is
    lambda sh, tmp: sh.expand_user("~no-such-user-here"),  # sh prints it unchanged
    lambda sh, tmp: sh.expand_user("~", username="someone"),
    lambda sh, tmp: sh.remove(str(tmp / "not-a-task-dir"), recurse=True),
    lambda sh, tmp: sh.remove(str(tmp / "ansible-tmp-1") + "/.", recurse=True),  # rm refuses `.`
    lambda sh, tmp: "echo ~",  # not the shell plugin's own in this process
])
def test_left_to_the_shell(sh, tmp_path: Path, make) -> None:
    assert warm_shell.run_recorded(_as_run(make(sh, tmp_path))) is None


def test_an_error_is_the_shells(sh, tmp_path: Path) -> None:
    (tmp_path / "taken").mkdir()
    cmd = sh.mkdtemp(basefile="taken", tmpdir=str(tmp_path))
    assert warm_shell.run_recorded(_as_run(cmd)) is None
    rc, _, err = _by_shell(cmd)
    assert rc != 0 and b"File exists" in err


def test_a_run_that_copies_files_leaves_no_tmp_directory(tmp_path: Path) -> None:
    """ansible.builtin.copy needs a remote tmp directory: made, used and removed without a shell."""
    remote_tmp = tmp_path / "remote-tmp"
    (tmp_path / "playbook.yml").write_text(f"""
- hosts: localhost
  gather_facts: false
  vars: {{ansible_remote_tmp: "{remote_tmp}"}}
  tasks:
    - copy: {{content: "hello\\n", dest: "{tmp_path}/out.txt", mode: "0640"}}
    - copy: {{content: "hello\\n", dest: "{tmp_path}/out.txt", mode: "0640"}}
      register: again
    - assert: {{that: ["again is not changed"]}}
""")

    async def run() -> object:
        executor = WarmExecutor(1, dict(os.environ))
        await executor.start()
        try:
            return await executor.run(RunRequest(ident="copy", private_data_dir=tmp_path,
                                                 playbook=tmp_path / "playbook.yml", extravars={}, keep_artifacts=1))
        finally:
            await executor.stop()

    before = dict(os.environ)
    try:
        result = asyncio.run(run())
    finally:  # the executor put its run environment into this process's (for its forkserver): not for later tests
        os.environ.clear()
        os.environ.update(before)
    assert result.outcome.ok, result.outcome.failures
    assert (tmp_path / "out.txt").read_text() == "hello\n"
    assert stat.S_IMODE((tmp_path / "out.txt").stat().st_mode) == 0o640
    assert remote_tmp.is_dir() and list(remote_tmp.iterdir()) == []
