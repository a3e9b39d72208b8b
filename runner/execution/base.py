"""The executor interface and the per-object input directory both executors share."""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from .outcome import Outcome, interpret

INVENTORY = f"localhost ansible_connection=local ansible_python_interpreter={sys.executable}\n"


@dataclass
class RunRequest:
    ident: str
    private_data_dir: Path  # one per object: inventory/, env/, artifacts/<ident>/
    playbook: Path
    extravars: dict[str, Any]
    env: dict[str, str] = field(default_factory=dict)  # added to the operator's environment
    verbosity: int = 0
    cmdline: str = ""  # --ansible-args, appended to ansible-playbook's arguments
    keep_artifacts: int = 20  # newest artifact directories kept for this object; 0 keeps none
    label: str = ""  # "<kind> <namespace>/<name>", for logs
    timeout: float | None = None  # seconds the run may take; then it is stopped (status "timeout")

    @property
    def artifact_dir(self) -> Path:
        return self.private_data_dir / "artifacts" / self.ident

    def clear_inputs(self) -> None:
        """ansible-runner writes env/envvars and env/extravars only when they do not exist yet, so the
        previous run's (its kubeconfig token, its copy of the object) must go before this run starts.
        They hold the whole object and a credential: they never outlive the run either."""
        for name in ("envvars", "extravars", "settings", "cmdline"):
            (self.private_data_dir / "env" / name).unlink(missing_ok=True)

    @property
    def inventory(self) -> Path:
        return self.private_data_dir / "inventory"

    def prepare_dir(self) -> None:
        """The run's inventory, as the Go ansible-operator writes it: the operator's ANSIBLE_INVENTORY (a
        directory copied whole, with its group_vars; a file as hosts), read again for every run so that an
        edit applies to the next one; without it, localhost alone."""
        given = os.environ.get("ANSIBLE_INVENTORY", "")
        shutil.rmtree(self.inventory, ignore_errors=True)
        if given and Path(given).is_dir():
            shutil.copytree(given, self.inventory, symlinks=True)
            return
        self.inventory.mkdir(parents=True, exist_ok=True)
        if given and Path(given).is_file():
            shutil.copyfile(given, self.inventory / "hosts")
        else:
            (self.inventory / "hosts").write_text(INVENTORY)


@dataclass
class RunResult:
    rc: int
    status: str  # successful | failed | canceled | error | timeout
    events: list[dict[str, Any]]
    artifact_dir: Path
    outcome: Outcome = field(init=False)

    def __post_init__(self) -> None:
        self.outcome = interpret(self.events, self.rc, self.status)


class Executor(Protocol):
    name: str

    async def start(self) -> None: ...

    async def run(self, request: RunRequest) -> RunResult: ...

    async def stop(self) -> None: ...


def read_events(artifact_dir: Path, keep: Callable[[dict[str, Any]], dict[str, Any]] = lambda e: e,
                ) -> list[dict[str, Any]]:
    """The job events ansible-runner's callback wrote, in order; ``keep`` says what of each is kept (it is
    applied as each is read, so that no more than one whole event is in memory at a time)."""
    events = []
    for path in (artifact_dir / "job_events").glob("*.json"):
        try:
            events.append(keep(json.loads(path.read_text())))
        except (OSError, ValueError):
            continue  # a partial file from a run killed mid-write
    events.sort(key=lambda e: e.get("counter", 0))
    return events


# What the operator reads of a job event (outcome.py, the run's log lines); a registered result of megabytes
# is not among it, and a run's events stay in memory until its reconcile ends.
RESULT_KEYS = ("changed", "failed", "msg", "censored", "period", "osdk_metric", "skipped_reason")
EVENT_DATA_KEYS = ("task", "task_action", "role", "ignore_errors")
MAX_STDOUT = 4000


def _slim_result(res: Any) -> Any:
    if not isinstance(res, dict):
        return res
    out = {k: res[k] for k in RESULT_KEYS if k in res}
    if isinstance(res.get("results"), list):
        out["results"] = [_slim_result(r) for r in res["results"]]
    return out


def slim_event(event: dict[str, Any]) -> dict[str, Any]:
    """A job event with what the operator reads of it; playbook_on_stats whole (its counts)."""
    if event.get("event") == "playbook_on_stats":
        return event
    data = event.get("event_data") or {}
    out = {k: event[k] for k in ("event", "counter", "created", "uuid") if k in event}
    if isinstance(event.get("stdout"), str):
        out["stdout"] = event["stdout"][-MAX_STDOUT:]
    out["event_data"] = {k: data[k] for k in EVENT_DATA_KEYS if k in data}
    if "res" in data:
        out["event_data"]["res"] = _slim_result(data["res"])
    return out


def read_run_events(artifact_dir: Path) -> list[dict[str, Any]]:
    """A run's job events in order, each with what the operator reads of it (``slim_event``)."""
    return read_events(artifact_dir, slim_event)


def prune_artifacts(request: RunRequest) -> None:
    """Keep only the newest ``keep_artifacts`` run directories of this object (0: none, not even this run's)."""
    root = request.private_data_dir / "artifacts"
    if not root.is_dir():
        return
    runs = sorted((p for p in root.iterdir() if p.is_dir() and not p.is_symlink()), key=lambda p: p.stat().st_mtime)
    excess = runs if request.keep_artifacts <= 0 else runs[: max(0, len(runs) - request.keep_artifacts)]
    for old in excess:
        shutil.rmtree(old, ignore_errors=True)
    request.clear_inputs()
