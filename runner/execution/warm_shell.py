"""Ansible's housekeeping around a module's run on the local connection, done by the task worker itself.

Before and after a module whose action plugin handles files (kubernetes.core's k8s and k8s_info among
them), Ansible runs three commands through ``/bin/sh``: ``echo ~``, a ``mkdir`` of the task's remote tmp
directory and an ``rm -f -r`` of it, each followed by ``sleep 0``: seven processes and about 10 ms a task.
Here the sh shell plugin's own commands are recognised by the exact string it returned in this process,
and done with the same effect (directories made with the mode the command's umask gives, the same
output). Nothing else is: a path a shell would expand, a username, a system tmp directory, or any error
(the real command then runs, so the message is Ansible's own).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import stat
from collections.abc import Callable

from ansible.plugins.shell import ShellBase

# what `echo <path>` prints unchanged: nothing for the shell to expand or split
_LITERAL = re.compile(r"[A-Za-z0-9_./@%+=:,-]+")
_SUFFIX = " && sleep 0"
_RECORDED: dict[str, Callable[[], bytes]] = {}


class _Fallback(Exception):
    """Let the shell do it."""


def _mkdtemp(basetmpdir: str, basetmp: str, basefile: str) -> Callable[[], bytes]:
    def run() -> bytes:
        # `( umask 77 && mkdir -p <dir> && mkdir <dir>/<base> && echo <base>=<dir>/<base> )`
        missing = []
        parent = basetmpdir
        while parent and not os.path.isdir(parent):
            missing.append(parent)
            parent = os.path.dirname(parent.rstrip("/"))
        try:
            for path in [*reversed(missing), basetmp]:
                os.mkdir(path, 0o700)
                os.chmod(path, 0o700)  # as under umask 77, whatever this process's umask
        except OSError:
            raise _Fallback from None
        return f"{basefile}={basetmp}\n".encode()

    return run


def _remove(path: str, recurse: bool) -> Callable[[], bytes]:
    def run() -> bytes:
        # `rm -f [-r] <path> > /dev/null 2>&1`
        try:
            mode = os.lstat(path).st_mode
            if stat.S_ISDIR(mode):
                if not recurse:
                    raise _Fallback
                shutil.rmtree(path)
            else:
                os.unlink(path)
        except FileNotFoundError:
            pass
        except OSError:
            raise _Fallback from None
        return b""

    return run


def _record(cmd: str, run: Callable[[], bytes]) -> str:
    if len(_RECORDED) > 64:  # commands generated and never run (another connection ran them)
        _RECORDED.clear()
    _RECORDED[cmd] = run
    return cmd


def run_recorded(cmd: object) -> tuple[int, bytes, bytes] | None:
    """For `<executable> -c '<a command recorded here> && sleep 0'`: its exit code and output, done here;
    None when the shell must run it."""
    if not isinstance(cmd, str):
        return None
    try:
        words = shlex.split(cmd)
    except ValueError:
        return None
    if len(words) != 3 or words[1] != "-c":
        return None
    inner = words[2].removesuffix(_SUFFIX)
    run = _RECORDED.pop(inner, None)
    if run is None:
        return None
    try:
        return 0, run(), b""
    except _Fallback:
        return None


_ORIGINAL_MKDTEMP = ShellBase.mkdtemp
_ORIGINAL_EXPAND_USER = ShellBase.expand_user
_ORIGINAL_REMOVE = ShellBase.remove


def _is_sh(shell: ShellBase) -> bool:
    return getattr(shell, "SHELL_FAMILY", None) == "sh"


def _recording_mkdtemp(self, basefile=None, system=False, mode=0o700, tmpdir=None):
    cmd = _ORIGINAL_MKDTEMP(self, basefile=basefile, system=system, mode=mode, tmpdir=tmpdir)
    if _is_sh(self) and basefile and not system and mode == 0o700:
        basetmpdir = tmpdir if tmpdir is not None else self.get_option("remote_tmp")
        if _LITERAL.fullmatch(basetmpdir) and _LITERAL.fullmatch(basefile) and basetmpdir.startswith("/"):
            _record(cmd, _mkdtemp(basetmpdir, self.join_path(basetmpdir, basefile), basefile))
    return cmd


def _recording_expand_user(self, user_home_path, username=""):
    cmd = _ORIGINAL_EXPAND_USER(self, user_home_path, username=username)
    if _is_sh(self) and user_home_path == "~" and not username:
        # sh's ~ is $HOME, else the user's home from the password database: as expanduser's
        _record(cmd, lambda: (os.path.expanduser("~") + "\n").encode())
    return cmd


def _recording_remove(self, path, recurse=False):
    cmd = _ORIGINAL_REMOVE(self, path, recurse=recurse)
    if _is_sh(self) and isinstance(path, str) and path.startswith("/"):
        _record(cmd, _remove(path, recurse))
    return cmd


def install() -> None:
    ShellBase.mkdtemp = _recording_mkdtemp
    ShellBase.expand_user = _recording_expand_user
    ShellBase.remove = _recording_remove
