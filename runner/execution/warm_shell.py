"""Ansible's housekeeping around a module's run on the local connection, done by the task worker itself.

Before and after a module whose action plugin handles files (kubernetes.core's k8s and k8s_info among
them), Ansible runs three commands through ``/bin/sh``: ``echo ~user``, a ``mkdir`` of the task's remote tmp
directory and an ``rm -f -r`` of it, each followed by ``sleep 0``: about eight processes and 10 ms a task.
Here the sh shell plugin's own commands are recognised by the exact string it returned in this process,
and done with the same effect (directories made with the mode the command's umask gives, the same
output). Nothing else is: a path a shell would expand, a bare ``~`` ($HOME), a system tmp directory, a
removal of anything but a task's tmp directory, or any error (the real command then runs, so the message is
Ansible's own).
"""

from __future__ import annotations

import os
import pwd
import re
import shlex
import shutil
import stat
from collections.abc import Callable

from ansible.plugins.shell import ShellBase

# what `echo <path>` prints unchanged: nothing for the shell to expand or split
_LITERAL = re.compile(r"[A-Za-z0-9_./@%+=:,-]+")
_SUFFIX = " && sleep 0"
_USER_NAME = re.compile(r"[_.A-Za-z0-9][-_.A-Za-z0-9]*")  # as the sh plugin passes it unquoted
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
        umask = os.umask(0o077)  # as the command's subshell: a parent's setgid bit and default ACL still apply
        try:
            for path in [*reversed(missing), basetmp]:
                os.mkdir(path)
        except OSError:
            raise _Fallback from None
        finally:
            os.umask(umask)
        return f"{basefile}={basetmp}\n".encode()

    return run


def _home_of(name: str) -> Callable[[], bytes]:
    def run() -> bytes:
        try:
            return (pwd.getpwnam(name).pw_dir + "\n").encode()
        except KeyError:  # sh prints ~name unchanged
            raise _Fallback from None

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


def shell_argument(cmd: object) -> str | None:
    """The command string of `<executable> -c '<command>'`, as the local connection is given every command;
    None for anything else."""
    if not isinstance(cmd, str):
        return None
    try:
        words = shlex.split(cmd)
    except ValueError:
        return None
    return words[2] if len(words) == 3 and words[1] == "-c" else None


def run_recorded(cmd: object) -> tuple[int, bytes, bytes] | None:
    """For `<executable> -c '<a command recorded here> && sleep 0'`: its exit code and output, done here;
    None when the shell must run it."""
    inner = shell_argument(cmd)
    run = _RECORDED.pop(inner.removesuffix(_SUFFIX), None) if inner is not None else None
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
    # `echo ~name` (Ansible names the user, e.g. ~root for the local connection): the home directory in the
    # password database, as sh's tilde expansion gives it. A bare ~ ($HOME, which sh prints as it is) and an
    # unknown user are the shell's.
    name = user_home_path[1:] if isinstance(user_home_path, str) and user_home_path.startswith("~") else ""
    if _is_sh(self) and _USER_NAME.fullmatch(name) and not username:
        _record(cmd, _home_of(name))
    return cmd


def _recording_remove(self, path, recurse=False):
    cmd = _ORIGINAL_REMOVE(self, path, recurse=recurse)
    # only what Ansible removes after a task: its own tmp directory, by a plain absolute path (never `.`, `..`
    # or `/`, which rm refuses and rmtree would empty before failing)
    plain = isinstance(path, str) and path.startswith("/") and os.path.normpath(path) == path.rstrip("/") != ""
    if _is_sh(self) and plain and "-tmp-" in os.path.basename(path.rstrip("/")):
        _record(cmd, _remove(path, recurse))
    return cmd


def install() -> None:
    ShellBase.mkdtemp = _recording_mkdtemp
    ShellBase.expand_user = _recording_expand_user
    ShellBase.remove = _recording_remove
