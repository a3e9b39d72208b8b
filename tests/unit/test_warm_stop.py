"""Stopping a warm run: at once, also one stopped before it made its own process group."""

from __future__ import annotations

import multiprocessing
import time

from runner.execution.warm import _stop


def _sleep() -> None:
    time.sleep(60)


def test_a_run_stopped_before_it_has_its_own_group_is_killed() -> None:
    """A cancellation between the run's start and its setpgrp: killing its group alone finds no group."""
    proc = multiprocessing.get_context("fork").Process(target=_sleep)  # (it never calls setpgrp)
    proc.start()
    try:
        _stop(proc)
        proc.join(5)
        assert proc.exitcode == -9
    finally:
        if proc.is_alive():
            proc.kill()
            proc.join()
