"""The fast path: runs fork from a server process that has already imported Ansible and the
kubernetes client, and modules run in a fork of the run instead of a new Python interpreter.

Where a cold run's time goes (`python -m bench.profile`): ~0.55 s before the playbook starts (~0.4 s of
it importing Ansible), ~0.9 s per kubernetes.core task (a fresh interpreter importing the kubernetes
client) and ~0.2 s exiting. Here:

- a ``multiprocessing`` forkserver preloads ansible's playbook CLI, ansible-runner's event callback and
  the kubernetes client once; each run is a fork of it running ``ansible-playbook``'s CLI in-process;
- Ansible pipelines modules (no temporary files), and the local connection's ``exec_command`` is
  intercepted for pipelined Python modules: the AnsiballZ payload executes in a fork of the task worker
  (already warm) rather than in ``python`` started afresh. Anything else (become, other interpreters,
  raw commands) goes through Ansible's own code unchanged.

What a run sees is what ansible-runner gives it: the same inventory, extra-vars file, callback (so the
same job events and stdout in the same artifact layout), verbosity and arguments. Nothing is parsed
ahead of time: every run reads the playbook and roles from disk, so edits apply to the next run.
"""

from __future__ import annotations

import asyncio
import json
import logging
import multiprocessing
import os
import shlex
import signal
import sys
import time
from pathlib import Path
from typing import Any

from .base import RunRequest, RunResult, prune_artifacts, read_run_events

log = logging.getLogger(__name__)

PRELOAD = [
    "runner.execution.lazy_client",  # first: before anything imports the kubernetes client
    "runner.execution.warm_child",
]


class WarmExecutor:
    name = "warm"

    def __init__(self, max_parallel: int, base_env: dict[str, str]) -> None:
        self._base_env = dict(base_env)
        self._ctx: Any = None
        self._running: dict[int, multiprocessing.process.BaseProcess] = {}
        self._reapers: set[asyncio.Future[None]] = set()
        self._sem = asyncio.Semaphore(max(1, max_parallel))

    def _child_env(self) -> dict[str, str]:
        import ansible_runner.display_callback.callback as runner_callbacks

        env = dict(self._base_env)
        # ansible-runner's own settings for a run (RunnerConfig.prepare_env), minus the per-run ones.
        env["ANSIBLE_CALLBACK_PLUGINS"] = ":".join(
            filter(None, [env.get("ANSIBLE_CALLBACK_PLUGINS"), os.path.dirname(runner_callbacks.__file__)]))
        env.setdefault("ANSIBLE_STDOUT_CALLBACK", "awx_display")
        env["ANSIBLE_RETRY_FILES_ENABLED"] = "False"
        env.setdefault("ANSIBLE_HOST_KEY_CHECKING", "False")
        env["ANSIBLE_PIPELINING"] = "True"  # modules as stdin payloads: no temp files, and interceptable
        env["RUNNER_OMIT_EVENTS"] = "False"
        env["RUNNER_ONLY_FAILED_EVENTS"] = "False"
        env["PYTHONUNBUFFERED"] = "1"
        return env

    async def start(self) -> None:
        # Ansible reads its configuration from the environment when it is imported, i.e. in the
        # forkserver: the environment must be complete before the server starts.
        os.environ.update(self._child_env())
        self._ctx = multiprocessing.get_context("forkserver")
        self._ctx.set_forkserver_preload(PRELOAD)
        t0 = time.monotonic()
        # Start the server now (a no-op child) rather than on the first run.
        await asyncio.get_running_loop().run_in_executor(None, self._warm_up)
        log.info("warm executor ready in %.1fs (forkserver with Ansible preloaded)", time.monotonic() - t0)

    def _warm_up(self) -> None:
        p = self._ctx.Process(target=_noop, name="warm-up")
        p.start()
        p.join()

    async def stop(self) -> None:
        for p in list(self._running.values()):
            _stop(p)

    async def run(self, request: RunRequest) -> RunResult:
        async with self._sem:
            return await self._run(request)

    async def _run(self, request: RunRequest) -> RunResult:
        request.prepare_dir()
        artifact_dir = request.artifact_dir
        artifact_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        env_dir = request.private_data_dir / "env"
        env_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        extravars = env_dir / "extravars"
        fd = os.open(extravars, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            json.dump(request.extravars, fh)
        argv = ["ansible-playbook", "-i", str(request.inventory),
                "-e", f"@{extravars}"]
        if request.verbosity:
            argv.append("-" + "v" * request.verbosity)
        if request.cmdline:
            argv += shlex.split(request.cmdline)
        argv.append(str(request.playbook))
        job = {
            "argv": argv,
            "cwd": str(request.playbook.parent),
            "env": {**request.env, "AWX_ISOLATED_DATA_DIR": str(artifact_dir)},
            "artifact_dir": str(artifact_dir),
        }
        (artifact_dir / "command").write_text(json.dumps({"command": argv, "cwd": job["cwd"],
                                                          "env": request.env}, indent=2))
        proc = self._ctx.Process(target=_child, args=(job,), name=f"run-{request.ident}")
        try:
            proc.start()
        except BaseException:
            request.clear_inputs()  # the extra-vars hold the whole object
            raise
        assert proc.pid is not None
        self._running[proc.pid] = proc
        loop = asyncio.get_running_loop()
        ended = loop.create_future()
        loop.add_reader(proc.sentinel, lambda: ended.done() or ended.set_result(None))
        status = None
        try:
            await asyncio.wait_for(asyncio.shield(ended), request.timeout)
        except TimeoutError:
            status = "timeout"
            _stop(proc)
            await _ended(proc, ended)
        except BaseException:  # cancelled (shutdown, lost leadership): stopped at once, never waited for here
            _stop(proc)
            request.clear_inputs()
            reaper = asyncio.ensure_future(self._reap(proc, ended))
            self._reapers.add(reaper)
            reaper.add_done_callback(self._reapers.discard)
            raise
        self._reap_now(proc)
        rc = proc.exitcode if proc.exitcode is not None else -1
        status = status or ("successful" if rc == 0 else ("canceled" if rc < 0 else "failed"))
        (artifact_dir / "rc").write_text(str(rc))
        (artifact_dir / "status").write_text(status)
        events = await loop.run_in_executor(None, read_run_events, artifact_dir)
        result = RunResult(rc=rc, status=status, events=events, artifact_dir=artifact_dir)
        await loop.run_in_executor(None, prune_artifacts, request)
        return result

    async def _reap(self, proc: multiprocessing.process.BaseProcess, ended: asyncio.Future[None]) -> None:
        await _ended(proc, ended)
        self._reap_now(proc)

    def _reap_now(self, proc: multiprocessing.process.BaseProcess) -> None:
        """Forgets a run whose process has ended (or will not: it was killed). Never blocks."""
        asyncio.get_running_loop().remove_reader(proc.sentinel)
        proc.join(timeout=0)
        self._running.pop(proc.pid or 0, None)


async def _ended(proc: multiprocessing.process.BaseProcess, ended: asyncio.Future[None], bound: float = 10.0) -> None:
    """Until the killed run's process is gone (its sentinel), without blocking the event loop."""
    try:
        await asyncio.wait_for(asyncio.shield(ended), bound)
    except TimeoutError:
        log.warning("run process %s did not end %.0fs after SIGKILL", proc.pid, bound)


def _stop(proc: multiprocessing.process.BaseProcess) -> None:
    """SIGKILL to the run and its process group: the run, its task workers and their module forks. The run
    itself first and by pid: one cancelled before it called setpgrp has no group yet (and then no children)."""
    if proc.pid is None:
        return
    for kill in (os.kill, os.killpg):
        try:
            kill(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def _noop() -> None:
    return None


def _child(job: dict[str, Any]) -> None:
    """A run, in a fresh fork of the preloaded server."""
    from . import warm_child

    os.setpgrp()
    rc = warm_child.run_playbook(job["argv"], job["cwd"], job["env"], Path(job["artifact_dir"]))
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(rc)
