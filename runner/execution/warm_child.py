"""Runs inside the warm executor's forkserver and its children; imported once, by the server.

Importing this module is the preload: Ansible's playbook CLI and executor and the kubernetes client (what every kubernetes.core module imports) end up in the server's
memory, and every run forks with them already loaded.
"""

from __future__ import annotations

import io
import os
import selectors
import shlex
import signal
import sys
import traceback
from pathlib import Path

# --- the preload -----------------------------------------------------------------------------------
# Not ansible-runner's event callback: it reads the run's artifact directory from the environment when
# imported, so each run imports it afresh (cheap once Ansible itself is loaded).
import ansible.cli.playbook
import ansible.executor.playbook_executor
import ansible.executor.task_executor
import ansible.module_utils.basic
import ansible.plugins.action
import ansible.plugins.connection.local as _local
import ansible.template  # noqa: F401
import kubernetes.client
import kubernetes.config
import kubernetes.dynamic  # noqa: F401
import yaml  # noqa: F401

import runner.ansible.redact  # noqa: F401

_ORIGINAL_EXEC = _local.Connection.exec_command
_PYTHON = os.path.realpath(sys.executable)


def _module_invocation(cmd: object) -> dict[str, str] | None:
    """For `/bin/sh -c '[VAR=value ...] <our python> && sleep 0'` (a pipelined module), the environment
    assignments; None for anything else."""
    if not isinstance(cmd, str):
        return None
    try:
        outer = shlex.split(cmd)
        if len(outer) != 3 or outer[1] != "-c":
            return None
        inner = shlex.split(outer[2])
    except ValueError:
        return None
    env: dict[str, str] = {}
    while inner and "=" in inner[0] and inner[0].split("=", 1)[0].isidentifier():
        k, v = inner.pop(0).split("=", 1)
        env[k] = v
    if not inner or inner[1:] not in ([], ["&&", "sleep", "0"]):
        return None
    if os.path.realpath(inner[0]) != _PYTHON:
        return None
    return env


def _run_module_in_fork(payload: bytes, cwd: bytes | str | None, env: dict[str, str]) -> tuple[int, bytes, bytes]:
    """Executes an AnsiballZ payload in a fork of this (already warm) process, as `python` would."""
    r_out, w_out = os.pipe()
    r_err, w_err = os.pipe()
    pid = os.fork()
    if pid == 0:  # the module process
        code = 1
        try:
            devnull = os.open(os.devnull, os.O_RDONLY)
            os.dup2(devnull, 0)
            os.dup2(w_out, 1)
            os.dup2(w_err, 2)
            for fd in (r_out, w_out, r_err, w_err, devnull):
                os.close(fd)
            for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGPIPE, signal.SIGCHLD):
                signal.signal(sig, signal.SIG_DFL)
            if cwd:
                os.chdir(cwd)
            os.environ.update(env)
            from ansible.module_utils import _internal

            _internal.is_controller = False  # module_utils behave as on a target host
            sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False), encoding="utf-8")
            sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding="utf-8", write_through=True)
            sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), encoding="utf-8", write_through=True)
            sys.argv = [sys.executable]
            exec(compile(payload, "<AnsiballZ>", "exec"), {"__name__": "__main__", "__builtins__": __builtins__})
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except BaseException:
            traceback.print_exc()
            code = 1
        finally:
            try:
                sys.stdout.flush()
                sys.stderr.flush()
            finally:
                os._exit(code)
    os.close(w_out)
    os.close(w_err)
    chunks: dict[int, list[bytes]] = {r_out: [], r_err: []}
    with selectors.DefaultSelector() as sel:
        for fd in chunks:
            sel.register(fd, selectors.EVENT_READ)
        while sel.get_map():
            for key, _ in sel.select():
                data = os.read(key.fd, 65536)
                if data:
                    chunks[key.fd].append(data)
                else:
                    sel.unregister(key.fd)
                    os.close(key.fd)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), b"".join(chunks[r_out]), b"".join(chunks[r_err])


def _exec_command(self, cmd, in_data=None, sudoable=True):
    if in_data is not None and not (sudoable and self.become):
        env = _module_invocation(cmd)
        if env is not None:
            # keep what the base class does first (it records the command for `ansible -vvv`)
            super(_local.Connection, self).exec_command(cmd, in_data=in_data, sudoable=sudoable)
            return _run_module_in_fork(in_data, self.cwd, env)
    return _ORIGINAL_EXEC(self, cmd, in_data=in_data, sudoable=sudoable)


def run_playbook(argv: list[str], cwd: str, env: dict[str, str], artifact_dir: Path) -> int:
    """`ansible-playbook argv` in this process, with stdout and stderr in the run's artifacts."""
    os.environ.update(env)
    os.chdir(cwd)
    out = os.open(artifact_dir / "stdout", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(out, 1)
    os.dup2(out, 2)
    os.close(out)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    if os.environ.get("PLAYBOOK_OPERATOR_MODULES_IN_PROCESS", "true").lower() != "false":
        _local.Connection.exec_command = _exec_command
    from ansible.cli.playbook import PlaybookCLI

    try:
        PlaybookCLI.cli_executor(argv)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    return 0
