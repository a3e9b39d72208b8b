"""Runs inside the warm executor's forkserver and its children; imported once, by the server.

Importing this module is the preload: Ansible's playbook CLI and executor, its own plugins, and the kubernetes
client (what every kubernetes.core module imports) end up in the server's memory, and every run forks with
them already loaded. Each run then prepares, once and before its tasks fork, what its tasks would each
have loaded again: the filter and test plugins and kubernetes.core's client (``_tqm_run``). What a run
reads from roles and collections is read by the run itself, so edits apply to the next run.
"""

from __future__ import annotations

import ast
import gc
import hashlib
import importlib
import importlib.abc
import importlib.machinery
import io
import os
import selectors
import shlex
import signal
import subprocess
import sys
import sysconfig
import traceback
import warnings
from pathlib import Path

# --- the preload -----------------------------------------------------------------------------------
# Not ansible-runner's event callback: it reads the run's artifact directory from the environment when
# imported, so each run imports it afresh (cheap once Ansible itself is loaded).
import ansible.cli.playbook
import ansible.constants as C
import ansible.executor.playbook_executor
import ansible.executor.task_executor
import ansible.executor.task_queue_manager as _tqm
import ansible.module_utils.basic
import ansible.plugins.action
import ansible.plugins.connection.local as _local
import ansible.template  # noqa: F401
import kubernetes.client
import kubernetes.config
import kubernetes.dynamic  # noqa: F401
import yaml  # noqa: F401
from ansible.plugins.loader import (
    become_loader,
    connection_loader,
    filter_loader,
    module_loader,
    module_utils_loader,
    shell_loader,
    test_loader,
)
from ansible.utils.collection_loader import AnsibleCollectionConfig, _collection_finder

import runner.ansible.redact  # noqa: F401
from runner.execution import warm_compiled, warm_kubernetes, warm_shell, warm_tasks, warm_templar

# More from the installed packages only (never a collection's or a role's code): what kubernetes.core's
# modules import (Ansible's URL helpers pull in cryptography's x509 and email: ~60 ms in every k8s task's
# module process), and what every run imports from Ansible's own plugins (the inventory plugins it tries,
# the callback, connection and shell plugins whose options it reads, the strategy, the task worker) and
# from ansible-runner (but not its callback module: it reads the run's environment when imported).
_INSTALLED_PRELOAD = (
    "ansible.module_utils.urls", "ansible.module_utils.common.dict_transformations", "jsonpatch",
    "ansible.module_utils._internal._json._profiles._module_legacy_m2c",  # ansible-core 2.19
    "ansible.executor.process.worker", "ansible.playbook.handler_task_include", "ansible.playbook.included_file",
    "ansible.playbook.role_include", "ansible.plugins.strategy.linear", "ansible.plugins.vars.host_group_vars",
    "ansible.plugins.cache.memory", "ansible.plugins.become.su", "ansible.plugins.become.sudo",
    *(f"ansible.plugins.inventory.{p}" for p in ("auto", "host_list", "ini", "script", "toml", "yaml")),
    *(f"ansible.plugins.callback.{p}" for p in ("default", "minimal", "oneline", "tree", "junit")),
    *(f"ansible.plugins.connection.{p}" for p in ("ssh", "paramiko_ssh", "psrp", "winrm")),
    *(f"ansible.plugins.shell.{p}" for p in ("sh", "cmd", "powershell")),
    "ansible_runner.interface", "ansible_runner.display_callback",
    # what kubernetes.core's k8s_exec, k8s_log and k8s_cp import: the core API and its models (~0.4 s), streams
    "kubernetes.client.api.core_v1_api", "kubernetes.stream",
)
for _name in _INSTALLED_PRELOAD:
    try:
        importlib.import_module(_name)
    except ImportError:
        pass
# Every run's PlaybookExecutor loads all connection, shell and become plugins, reading each one's option
# definitions from its DOCUMENTATION (~40 ms of YAML a run); Ansible keeps them in its configuration once read.
# Here they are read once for Ansible's own plugins; a project's own are still read by the run.
for _loader in (connection_loader, shell_loader, become_loader):
    list(_loader.all(class_only=True))


# kubernetes.core's k8s_exec imports core_v1_api from ``kubernetes.client.apis``, the client's deprecated alias
# package, which star-imports every API class (1-2 s and ~60 MB in every k8s_exec module process before it was
# lazy: lazy_client). Loaded here once; its deprecation notice is for kubernetes.core, not for our log.
with warnings.catch_warnings(record=True):
    importlib.import_module("kubernetes.client.apis")
warm_templar.install()
warm_compiled.install()
warm_kubernetes.install()

_ORIGINAL_META_YML_TO_DICT = _collection_finder._meta_yml_to_dict
_PARSED_META: dict[tuple[object, bytes], object] = {}


def _meta_yml_to_dict(yaml_string_data: bytes | str, content_id: object) -> object:
    """Ansible's parse of a collection's routing (meta/runtime.yml), remembered by content: Ansible's own
    (370 KB of YAML, ~0.1 s) is parsed once, here in the forkserver, instead of in every run; a project's
    edited runtime.yml is other content and is parsed afresh. A run's changes to what it is given stay in
    that run's fork."""
    data = yaml_string_data.encode() if isinstance(yaml_string_data, str) else bytes(yaml_string_data)
    key = (content_id, hashlib.sha256(data).digest())
    if key not in _PARSED_META:
        _PARSED_META[key] = _ORIGINAL_META_YML_TO_DICT(yaml_string_data, content_id)
    return _PARSED_META[key]


_collection_finder._meta_yml_to_dict = _meta_yml_to_dict
_meta_yml_to_dict(Path(C.__file__).with_name("config").joinpath("ansible_builtin_runtime.yml").read_bytes(),
                  ("ansible.builtin", "runtime.yml"))

# kubernetes.core's module_utils, imported once per run (from wherever the run's collections path finds
# them, so a project's own copy or an upgrade applies to the next run) instead of once per task.
_KUBERNETES_CORE_UTILS = [f"ansible_collections.kubernetes.core.plugins.module_utils.{m}" for m in (
    "k8s.runner", "k8s.core", "k8s.client", "k8s.service", "k8s.resource", "k8s.waiter", "common", "args_common",
    "selector", "apply", "hashes", "k8sdynamicclient", "client.discovery", "client.resource")]

_ORIGINAL_EXEC = _local.Connection.exec_command
_ORIGINAL_TQM_RUN = _tqm.TaskQueueManager.run
_INSTALLED = tuple({os.path.realpath(sysconfig.get_paths()[k]) + os.sep for k in ("purelib", "platlib", "stdlib")})
_SHARED_LOCAL_TMP = C.DEFAULT_LOCAL_TMP  # made when Ansible was imported, i.e. once, by the forkserver
# What a module run by an interpreter would see: prefix, version, fresh sys.path, flags, warning options and
# user; and the environment it runs with, which must be the one it was given (a shell adds only these).
_PROBE = ("import os, sys; print(repr(((sys.prefix, sys.version, sys.path, tuple(sys.flags), sys.warnoptions, "
          "os.getuid()), dict(os.environ))))")
_SHELL_VARIABLES = frozenset({"PWD", "OLDPWD", "SHLVL", "_"})


def _interpreter_identity(path: str, env: dict[str, str]) -> tuple | None:
    """A fresh ``path``'s view, or None when it cannot say or would not run with the environment given."""
    given = {**os.environ, **env}
    try:
        proc = subprocess.run([path, "-c", _PROBE], capture_output=True, text=True, timeout=30, env=given,
                              stdin=subprocess.DEVNULL)
        view, seen = ast.literal_eval(proc.stdout) if proc.returncode == 0 else (None, {})
    except (OSError, subprocess.SubprocessError, ValueError, SyntaxError):
        return None
    changed = {k for k in given.keys() | seen.keys() if given.get(k) != seen.get(k)} - _SHELL_VARIABLES
    return None if changed else view


def _is_our_python(path: str, env: dict[str, str]) -> bool:
    """An interpreter the inventory names by another path (a wrapper script or a symlink, as an image's
    /usr/local/bin/python3 often is) is ours when a fresh one of it would see exactly what a fresh one of
    ours sees. Asked once per interpreter file and module environment, not per task: the answer is kept
    in the forkserver's local tmp, which every run and task shares."""
    if path == sys.executable:
        return True
    try:
        st = os.stat(path)
    except OSError:
        return False
    key = hashlib.sha256(repr((path, st.st_ino, st.st_mtime_ns, st.st_size, sorted(env.items()))).encode())
    answer = os.path.join(_SHARED_LOCAL_TMP, f"python-{key.hexdigest()[:24]}")
    try:
        with open(answer) as f:
            return f.read() == "same"
    except OSError:
        pass
    theirs = _interpreter_identity(path, env)
    same = theirs is not None and theirs == _interpreter_identity(sys.executable, env)
    partial = f"{answer}.{os.getpid()}"
    with open(partial, "w") as f:
        f.write("same" if same else "other")
    os.replace(partial, answer)
    return same


class _PayloadModules(importlib.abc.MetaPathFinder):
    """``ansible.*`` names the installed package lacks, from the module's payload. A role's library/ module
    is ``ansible.legacy.<name>`` and its module_utils are ``ansible.module_utils.<name>``: in a fresh
    interpreter the payload's ``ansible`` package (first on sys.path, extended over the installed one) has
    them, but this process imported the installed ``ansible`` before the payload was on sys.path."""

    def find_spec(self, fullname: str, path: object = None, target: object = None):
        if not fullname.startswith("ansible."):
            return None
        parts = fullname.split(".")[1:-1]
        payloads = [e for e in sys.path if isinstance(e, str) and os.path.isfile(e)]  # zip files
        return importlib.machinery.PathFinder.find_spec(fullname, [os.path.join(p, "ansible", *parts) for p in payloads])


def _editable_module_sources() -> list[str]:
    """The module and module_utils directories of this run that are not part of the installed packages:
    the roles' library/ and module_utils/, configured library paths, collections outside site-packages."""
    dirs = [*module_loader._get_paths(subdirs=False), *module_utils_loader._get_paths(subdirs=False)]
    for root in AnsibleCollectionConfig.collection_paths or []:
        dirs.append(os.path.join(root, "ansible_collections"))
    return [d for d in dict.fromkeys(os.path.realpath(d) for d in dirs)
            if os.path.isdir(d) and not (d + os.sep).startswith(_INSTALLED)]


def _fingerprint(dirs: list[str]) -> str:
    h = hashlib.sha256()
    for top in dirs:
        for root, subdirs, files in os.walk(top):
            subdirs[:] = sorted(d for d in subdirs if d != "__pycache__")
            for name in sorted(files):
                if name.endswith(".py"):
                    try:
                        st = os.stat(os.path.join(root, name))
                    except OSError:  # removed meanwhile
                        continue
                    h.update(f"{root}/{name}\0{st.st_mtime_ns}\0{st.st_size}\n".encode())
    return h.hexdigest()[:16]


def _tqm_run(self, play):
    # Ansible keeps built module payloads (AnsiballZ) in C.DEFAULT_LOCAL_TMP, keyed by module name only,
    # and every run shares the forkserver's: an edited module in a role or a project's collection would
    # not reach the next run. Runs share the payloads only while those sources are unchanged.
    local_tmp = os.path.join(_SHARED_LOCAL_TMP, "sources-" + _fingerprint(_editable_module_sources()))
    os.makedirs(local_tmp, mode=0o700, exist_ok=True)
    C.DEFAULT_LOCAL_TMP = local_tmp
    # Every task worker (a fork of this process) that templates anything loads all the filter and test
    # plugins it can see (Ansible's own, the roles' filter_plugins) unless this process already has.
    for loader in (filter_loader, test_loader):
        list(loader.all())
    _prepare_kubernetes_core()
    return _ORIGINAL_TQM_RUN(self, play)


def _prepare_kubernetes_core() -> None:
    """Imports kubernetes.core's module_utils and builds the API client its modules would build from the
    run's environment (K8S_AUTH_*, KUBECONFIG): every task's module process is a fork of this one and finds
    both ready (the collection keeps clients in a pool keyed by their configuration), instead of importing,
    reading the kubeconfig and the discovery cache, and asking the server's version each time. A task
    with other credentials misses the pool and builds its own, as before. Building the client may not fail a
    run (a module that cannot build its client says why itself); closing its connections before any fork
    must not be skipped."""
    try:
        for name in _KUBERNETES_CORE_UTILS:
            importlib.import_module(name)
        importlib.import_module(warm_tasks.KUBERNETES_CORE_CLIENT).get_api_client()
    except Exception:
        pass
    warm_tasks.drop_kubernetes_connections()


def _module_invocation(cmd: object) -> dict[str, str] | None:
    """For `/bin/sh -c '[VAR=value ...] <our python> && sleep 0'` (a pipelined module), the environment
    assignments; None for anything else."""
    argument = warm_shell.shell_argument(cmd)
    try:
        inner = shlex.split(argument) if argument is not None else []
    except ValueError:
        return None
    env: dict[str, str] = {}
    while inner and "=" in inner[0] and inner[0].split("=", 1)[0].isidentifier():
        k, v = inner.pop(0).split("=", 1)
        env[k] = v
    if not inner or inner[1:] not in ([], ["&&", "sleep", "0"]):
        return None
    return env if _is_our_python(inner[0], env) else None


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
            sys.meta_path.append(_PayloadModules())
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
    if not (sudoable and self.become):
        env = _module_invocation(cmd) if in_data is not None else None
        done = warm_shell.run_recorded(cmd) if in_data is None else None
        if env is not None or done is not None:
            # keep what the base class does first, and the line `ansible -vvv` prints for a command
            super(_local.Connection, self).exec_command(cmd, in_data=in_data, sudoable=sudoable)
            _local.display.vvv(f"EXEC {cmd}", host=self._play_context.remote_addr)
            return done if done is not None else _run_module_in_fork(in_data, self.cwd, env)
    return _ORIGINAL_EXEC(self, cmd, in_data=in_data, sudoable=sudoable)


def _switched_on(name: str) -> bool:
    return os.environ.get(name, "true").lower() != "false"


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
    if _switched_on("PLAYBOOK_OPERATOR_MODULES_IN_PROCESS"):
        _local.Connection.exec_command = _exec_command
        warm_shell.install()
    if _switched_on("PLAYBOOK_OPERATOR_TASKS_IN_PROCESS"):
        warm_tasks.install()
    _tqm.TaskQueueManager.run = _tqm_run
    from ansible.cli.playbook import PlaybookCLI

    try:
        PlaybookCLI.cli_executor(argv)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    return 0


# Last, once everything above is loaded: the preload lives as long as the server, so it is left out of the
# collections of every run forked from it. A run's full collections would otherwise walk all of it, and the
# fewer objects the server holds, the more often they come (Python runs one when the objects created since the
# last exceed a quarter of those that survived it): ~0.05 s a run once the kubernetes client's models became
# lazy (lazy_client).
gc.freeze()
