"""The reference path: ansible-runner starts a fresh ``ansible-playbook`` for every run.

Slow (every run pays Python start-up and Ansible's imports) but with nothing shared between runs; kept
as the fallback (``--executor cold``) and as the yardstick the warm path is tested against.
"""

from __future__ import annotations

import asyncio
import logging
import shlex
from concurrent.futures import ThreadPoolExecutor

import ansible_runner

from .base import RunRequest, RunResult, prune_artifacts, read_run_events

log = logging.getLogger(__name__)


class ColdExecutor:
    name = "cold"

    def __init__(self, max_parallel: int, base_env: dict[str, str]) -> None:
        # ansible-runner blocks while it drives the child process: one thread per run in flight.
        self._pool = ThreadPoolExecutor(max_workers=max_parallel, thread_name_prefix="ansible-runner")
        self._base_env = base_env
        self._cancelled: set[str] = set()
        self._stopping = False

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        self._stopping = True  # every run in progress is told to cancel (ansible-runner kills its process)
        self._pool.shutdown(wait=False, cancel_futures=True)

    async def run(self, request: RunRequest) -> RunResult:
        loop = asyncio.get_running_loop()
        future = loop.run_in_executor(self._pool, self._run, request)
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            self._cancelled.add(request.ident)
            raise

    def _run(self, request: RunRequest) -> RunResult:
        request.prepare_dir()
        request.clear_inputs()
        envvars = {**self._base_env, **request.env}
        r = ansible_runner.run(
            private_data_dir=str(request.private_data_dir),
            ident=request.ident,
            playbook=str(request.playbook),
            inventory=str(request.inventory),
            extravars=request.extravars,
            envvars=envvars,
            verbosity=request.verbosity or None,
            cmdline=" ".join(shlex.quote(a) for a in shlex.split(request.cmdline)) or None,
            quiet=True,
            settings={"suppress_ansible_output": True, "suppress_output_file": False},
            rotate_artifacts=0,  # pruning is ours: upstream cannot express "keep none"
            cancel_callback=lambda: self._stopping or request.ident in self._cancelled,
            timeout=int(request.timeout + 0.999) if request.timeout else None,  # its process group killed
        )
        self._cancelled.discard(request.ident)
        events = read_run_events(request.artifact_dir)
        result = RunResult(rc=r.rc if r.rc is not None else -1, status=r.status or "error",
                           events=events, artifact_dir=request.artifact_dir)
        prune_artifacts(request)
        return result
