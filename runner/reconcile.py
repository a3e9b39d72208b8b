"""One reconcile of one object: finalizer bookkeeping, extra-vars, the run, status, Events, next time.

Called by the queue with the newest copy of the object the watch has seen. Returns what the queue
should do next: nothing (gone), retry with backoff (failed), or come back after requeue_after or the
reconcile period.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import shutil
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from . import metrics, status
from .apisession import Fenced
from .config import (
    DEFAULT_RUN_TIMEOUT,
    MAX_RUNNER_ARTIFACTS_ANNOTATION,
    RECONCILE_PERIOD_ANNOTATION,
    RUN_TIMEOUT_ANNOTATION,
    VERBOSITY_ANNOTATION,
    Watch,
    format_duration,
    parse_duration,
    positive,
)
from .dependents import CLEANUP_FINALIZER, CleanupFailed, DependentRecords
from .events import Recorder
from .execution import Executor, RunRequest, RunResult
from .kube import JSON_PATCH, ApiError, Gone, Kube, NotFound, Resource
from .params import build_extravars
from .queue import REQUEUE, RESYNC, Key, Outcome

log = logging.getLogger("playbook_operator.reconcile")


class ObjectSource(Protocol):
    def latest(self, key: Key) -> dict[str, Any] | None: ...

    def observed(self, key: Key, obj: dict[str, Any]) -> None: ...


class ResourceSource(Protocol):
    def get(self) -> Resource: ...


class RunEnvironment(Protocol):
    """Per-run environment for Ansible: a kubeconfig that tells the API proxy which object the run is for.
    Returns the environment and what to call when the run is over."""

    def env_for(self, watch: Watch, obj: dict[str, Any], finalizer_run: bool) -> tuple[dict[str, str], Callable[[], None]]: ...


@dataclass
class Settings:
    default_reconcile_period: float
    artifacts_root: Path
    ansible_args: str
    log_events: str  # Tasks | Everything | Nothing
    run_timeout: float = DEFAULT_RUN_TIMEOUT  # --run-timeout; 0: no limit
    debug_logs: bool = False  # ANSIBLE_DEBUG_LOGS: each run's output in the log, as the Go operator prints it


def _ident() -> str:
    # Sortable by time, unique among concurrent runs.
    return f"{time.strftime('%Y%m%dT%H%M%S')}-{secrets.token_hex(3)}"


DEBUG_OUTPUT = 1024 * 1024  # the end of a run's output that ANSIBLE_DEBUG_LOGS shows


def tail(path: Path, size: int = 4000) -> str:
    """The end of a run's output, however long it is and whatever bytes it holds."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - size))
            return fh.read().decode(errors="replace")
    except OSError:
        return "(no output)"


def _int_annotation(obj: dict[str, Any], name: str, default: int) -> int:
    raw = (obj.get("metadata", {}).get("annotations") or {}).get(name)
    if raw is None:
        return default
    try:
        return int(raw)
    except ValueError:
        log.warning("ignoring annotation %s=%r on %s: not an integer", name, raw, obj["metadata"].get("name"))
        return default


class Reconciler:
    def __init__(self, watch: Watch, resource: ResourceSource, settings: Settings, kube: Kube, executor: Executor,
                 source: ObjectSource, playbooks: dict[str, Path], run_env: RunEnvironment,
                 records: DependentRecords) -> None:
        self.watch = watch
        self._resource = resource
        self.res: Resource  # resolved on the first reconcile (the CRD may come after the operator)
        self.settings = settings
        self.kube = kube
        self.executor = executor
        self.source = source
        self.playbooks = playbooks  # "main" and, with a finalizer role/playbook, "finalizer"
        self.run_env = run_env
        self.status = status.StatusWriter(kube)
        self.records = records
        self.recorder = Recorder(kube)
        self.kind = watch.gvk.kind
        # at zero from the start, so that "no failures" is a series and rate() over it has data
        metrics.RUNS_TOTAL.labels(self.kind)
        metrics.RUNS_FAILED.labels(self.kind)

    # ------------------------------------------------------------------ helpers
    def private_dir(self, namespace: str, name: str) -> Path:
        # As the Go operator lays them out: <group>/<version>/<kind>/[<namespace>/]<name>, empty parts left out.
        g = self.watch.gvk
        return self.settings.artifacts_root.joinpath(*filter(None, (g.group, g.version, g.kind, namespace, name)))

    def reconcile_period(self, obj: dict[str, Any]) -> float | None:
        """The object's resync period, read once per reconcile: its annotation's, else the watch's, else the
        flag's. None: no periodic resync (0, or a negative annotation, which controller-runtime takes as no
        requeue; that one is refused with a warning). An annotation that is no duration raises ValueError."""
        raw = (obj.get("metadata", {}).get("annotations") or {}).get(RECONCILE_PERIOD_ANNOTATION)
        if raw is None:
            period = self.watch.reconcile_period
            return positive(self.settings.default_reconcile_period if period is None else period)
        try:
            period = parse_duration(raw)
        except ValueError:
            raise ValueError(f"Unable to parse reconcile period annotation {RECONCILE_PERIOD_ANNOTATION}={raw!r}: "
                             "expected a duration such as 30s or 5m") from None
        if period < 0:
            log.warning("%s %s/%s: annotation %s=%r is negative: no periodic reconcile (as the Go operator)",
                        self.kind, obj["metadata"].get("namespace") or "", obj["metadata"].get("name"),
                        RECONCILE_PERIOD_ANNOTATION, raw)
        return positive(period)

    def run_timeout(self, obj: dict[str, Any]) -> tuple[float | None, str]:
        """How long a run of the object may take (None: no limit), and whose limit it is: the object's
        annotation, else the watch's runTimeout, else --run-timeout. An annotation that is no duration raises
        ValueError; a negative one is ignored with a warning."""
        raw = (obj.get("metadata", {}).get("annotations") or {}).get(RUN_TIMEOUT_ANNOTATION)
        if raw is not None:
            try:
                seconds = parse_duration(raw)
            except ValueError:
                raise ValueError(f"Unable to parse run timeout annotation {RUN_TIMEOUT_ANNOTATION}={raw!r}: "
                                 "expected a duration such as 30s or 5m (0: no limit)") from None
            if seconds >= 0:
                return positive(seconds), f"annotation {RUN_TIMEOUT_ANNOTATION}"
            log.warning("%s %s/%s: annotation %s=%r is negative: ignored", self.kind,
                        obj["metadata"].get("namespace") or "", obj["metadata"].get("name"), RUN_TIMEOUT_ANNOTATION, raw)
        if self.watch.run_timeout is not None:
            return positive(self.watch.run_timeout), "the watch's runTimeout"
        return positive(self.settings.run_timeout), "--run-timeout"

    async def _event(self, obj: dict[str, Any], etype: str, reason: str, message: str) -> None:
        await self.recorder.record(obj, etype, reason, message)

    async def _update_finalizers(self, key: Key, obj: dict[str, Any], change,
                                 before: Callable[[dict[str, Any]], Awaitable[None]] | None = None) -> dict[str, Any]:
        """Applies ``change(finalizers) -> finalizers`` with a test on resourceVersion, re-reading on a race,
        so that a finalizer someone else added meanwhile is never dropped; ``before(obj)``, if given, is done first
        in each round, for the object as that round reads it. Raises Gone with the object."""
        uid = obj["metadata"]["uid"]
        for _ in range(8):
            if before is not None:
                await before(obj)
            meta = obj["metadata"]
            body = [{"op": "test", "path": "/metadata/resourceVersion", "value": meta["resourceVersion"]},
                    {"op": "add", "path": "/metadata/finalizers", "value": change(list(meta.get("finalizers") or []))}]
            try:
                return await self.kube.patch(self.res, key[0], key[1], body, JSON_PATCH)
            except NotFound:
                raise Gone() from None
            except ApiError as exc:
                if exc.status not in (409, 422):
                    raise
            obj = await self._fresh(key, uid)
        raise RuntimeError(f"finalizers of {self.kind} {key[0]}/{key[1]} kept changing under us")

    async def _fresh(self, key: Key, uid: str) -> dict[str, Any]:
        """The object ``uid`` as the API server has it now. Raises Gone when it is deleted, or another object
        (created again under the same name) has taken its place."""
        try:
            obj = await self.kube.get(self.res, key[0], key[1])
        except NotFound:
            raise Gone() from None
        if obj["metadata"].get("uid") != uid:
            raise Gone()
        return obj

    # ------------------------------------------------------------------ the reconcile
    async def _gone(self, key: Key, uid: str | None) -> Outcome:
        """The object is gone (or going, with nothing left for us to do): so are its runner directories, and
        the series about it, unless another object of that name has them now."""
        await asyncio.to_thread(shutil.rmtree, self.private_dir(*key), ignore_errors=True)
        successor = self.source.latest(key)
        if successor is None or successor["metadata"].get("uid") == uid:
            # again here: a run that ended after the watch saw the deletion may have recorded series for it
            metrics.forget_resource(metrics.owner_of(self.watch.gvk, key))
        return Outcome(forget=True)

    async def __call__(self, key: Key, reasons: frozenset[str]) -> Outcome:
        obj = self.source.latest(key)
        if obj is None:
            return await self._gone(key, None)
        if not hasattr(self, "res"):
            self.res = await self._resource.get()
        started = time.monotonic()
        uid = obj["metadata"]["uid"]
        try:
            return await self._reconcile(key, uid, reasons)
        except Gone:
            return await self._gone(key, uid)
        except Fenced:
            log.info("%s %s/%s: not written, this operator is no longer sure it leads", self.kind, *key)
            return Outcome(error=True)
        finally:
            metrics.RECONCILE_SECONDS.labels(str(self.watch.gvk)).observe(time.monotonic() - started)

    async def _reconcile(self, key: Key, uid: str, reasons: frozenset[str]) -> Outcome:
        # The cache may lag (a watch outage): the run is for the object the API server has, never a ghost.
        obj = await self._fresh(key, uid)
        self.source.observed(key, obj)
        watch, meta = self.watch, obj["metadata"]
        ns, name = key
        fin = watch.finalizer.name if watch.finalizer else None
        deleting = bool(meta.get("deletionTimestamp"))
        if deleting and (fin is None or fin not in (meta.get("finalizers") or [])):
            return await self._after_finalizer(key, obj)

        try:
            resync = self.reconcile_period(obj)
            timeout, timeout_source = self.run_timeout(obj)
        except ValueError as exc:
            await self._finish_failed(obj, [str(exc)], None)
            return Outcome(error=True)

        if fin and not deleting and fin not in (meta.get("finalizers") or []):
            obj = await self._update_finalizers(key, obj, lambda f: [*f, fin] if fin not in f else f)
            self.source.observed(key, obj)

        # Nothing new on the object: a resync or a requeue the role asked for. Such a run writes status
        # only if its result differs from what status already says.
        idle = reasons <= {RESYNC, REQUEUE}
        if watch.manage_status and not idle:
            written = await self.status.update(self.res, ns, name, uid, status.running, current=obj)
            if written:
                obj = written
                self.source.observed(key, obj)

        finalizer_run = deleting
        playbook = self.playbooks["finalizer" if finalizer_run and "finalizer" in self.playbooks else "main"]
        run_env, release = self.run_env.env_for(watch, obj, finalizer_run)
        request = RunRequest(
            ident=_ident(),
            private_data_dir=self.private_dir(ns, name),
            playbook=playbook,
            extravars=build_extravars(watch, obj, finalizer_run),
            env=run_env,
            verbosity=max(0, min(7, _int_annotation(obj, VERBOSITY_ANNOTATION, watch.ansible_verbosity))),
            cmdline=self.settings.ansible_args,
            keep_artifacts=_int_annotation(obj, MAX_RUNNER_ARTIFACTS_ANNOTATION, watch.max_runner_artifacts),
            label=f"{self.kind} {ns + '/' if ns else ''}{name}",
            timeout=timeout,
        )
        what = "finalizer" if finalizer_run else "run"
        log.info("%s start: %s (%s) [%s]", what, request.label, watch.run_target(finalizer_run), ",".join(sorted(reasons)),
                 extra={"object": request.label, "ident": request.ident})
        metrics.RUNS_TOTAL.labels(self.kind).inc()
        t0 = time.monotonic()
        try:
            result = await self.executor.run(request)
        finally:
            release()
        if result.status == "timeout":
            result.outcome = result.outcome.stopped(
                f"the run was stopped after {format_duration(timeout or 0)}, its run timeout ({timeout_source})")
        outcome = result.outcome
        self._log_result(request, result, time.monotonic() - t0, what)
        for payload in outcome.metrics:
            try:
                metrics.record_user_metric(payload, owner=metrics.owner_of(watch.gvk, key))
            except metrics.UserMetricError as exc:
                log.warning("osdk_metric from %s: %s", request.label, exc)
        if not outcome.ok:
            metrics.RUNS_FAILED.labels(self.kind).inc()
        metrics.RECONCILE_RESULT.labels(str(watch.gvk), "succeeded" if outcome.ok else "failed").inc()

        latest = await self._fresh(key, uid)
        self.source.observed(key, latest)

        requeue = outcome.requeue_after
        if requeue is not None and requeue <= 0:
            log.warning("%s: requeue_after %.0fs is not positive: no requeue (as controller-runtime takes it)",
                        request.label, requeue, extra={"object": request.label, "ident": request.ident})
        # A finalizer that asks to be requeued is waiting for something (a final backup, say): not done yet.
        if finalizer_run and outcome.ok and not (requeue is not None and requeue > 0):
            updated = await self._update_finalizers(key, latest, lambda f: [x for x in f if x != fin])
            return await self._after_finalizer(key, updated)

        # observedGeneration says which spec the result is for: the one the run was given, even if the
        # object changed meanwhile (that change has its own run queued).
        ran_generation = obj["metadata"].get("generation")
        was_failed = status.is_failed(latest)
        if watch.manage_status:
            if outcome.ok:
                await self.status.update(
                    self.res, ns, name, uid,
                    lambda c: status.done(c, True, outcome.result, []),
                    observed_generation=ran_generation, skip_if_equivalent=idle, current=latest)
            else:
                await self._finish_failed(latest, outcome.failures, outcome.result, ran_generation)
        elif not outcome.ok:
            await self._event(latest, "Warning", "ReconcileFailed", "\n".join(outcome.failures))
        if outcome.ok and was_failed:
            await self._event(latest, "Normal", "ReconcileSucceeded", "Reconciliation succeeded after failures")

        if requeue is not None:  # the role's wish wins, as in the Go operator; one that is not positive means none
            return Outcome(requeue_after=positive(requeue))
        return Outcome(error=True) if not outcome.ok else Outcome(resync_after=resync)

    async def _after_finalizer(self, key: Key, obj: dict[str, Any]) -> Outcome:
        """The role's finalizer (if any) is done: the annotation-linked dependents recorded for the object go
        now, in this same reconcile (no further event may come to trigger it), then Kubernetes removes it.
        What cannot be deleted keeps the object, and says why on it."""
        uid, count = obj["metadata"]["uid"], 0
        if CLEANUP_FINALIZER in (obj["metadata"].get("finalizers") or []):
            # (cleaned up again in each round of the finalizer's update: a record that landed meanwhile, from a request
            # of a run that outlived it, moved the resourceVersion, and its object goes too)
            async def clean(current: dict[str, Any]) -> None:
                nonlocal count
                if CLEANUP_FINALIZER in (current["metadata"].get("finalizers") or []):
                    count += await self.records.cleanup(current, self.watch.gvk)
            try:
                await self._update_finalizers(key, obj, lambda f: [x for x in f if x != CLEANUP_FINALIZER], clean)
            except CleanupFailed as exc:
                message = (f"{exc}. They stay, and so does this {self.kind} (finalizer {CLEANUP_FINALIZER}) "
                           "until they can be deleted; remove the finalizer to leave them behind.")
                log.warning("%s %s/%s: %s", self.kind, *key, message)
                await self._finish_failed(obj, [message], None, reason="CleanupFailed")
                return Outcome(error=True)
            except Gone:
                pass
            log.info("deleted %d annotation-linked dependent(s) of %s %s/%s", count, self.kind, *key)
        return await self._gone(key, uid)

    async def _finish_failed(self, obj: dict[str, Any], failures: list[str], result: dict[str, Any] | None,
                             generation: int | None = None, reason: str = "ReconcileFailed") -> None:
        meta = obj["metadata"]
        # The Event first: whoever sees the Failure condition finds its Event already there.
        await self._event(obj, "Warning", reason, "\n".join(failures))
        if self.watch.manage_status:
            await self.status.update(self.res, meta.get("namespace") or "", meta["name"], meta["uid"],
                                     lambda c: status.done(c, False, result, failures),
                                     observed_generation=generation if generation is not None else meta.get("generation"),
                                     current=obj)

    def _log_result(self, request: RunRequest, result: RunResult, seconds: float, what: str) -> None:
        out = result.outcome
        counts = out.result or {}
        extra = {"object": request.label, "ident": request.ident}
        if self.settings.log_events != "Nothing":
            for ev in result.events:
                data = ev.get("event_data") or {}
                if self.settings.log_events == "Everything" and ev.get("stdout"):
                    log.info("%s: %s", request.label, ev["stdout"].strip(), extra=extra)
                elif ev.get("event") == "runner_on_failed" and not data.get("ignore_errors"):
                    msg = (data.get("res") or {}).get("msg", "")
                    log.error("%s: task %r failed: %s", request.label, data.get("task"), msg, extra=extra)
                elif self.settings.log_events == "Tasks" and ev.get("event") in ("runner_on_ok", "runner_on_skipped"):
                    log.debug("%s: task %r %s", request.label, data.get("task"),
                              "changed" if (data.get("res") or {}).get("changed") else ev["event"][10:], extra=extra)
        log.info("%s end: %s %s in %.2fs (ok=%s changed=%s skipped=%s failures=%s)%s", what, request.label,
                 "succeeded" if out.ok else "FAILED", seconds, counts.get("ok", 0), counts.get("changed", 0),
                 counts.get("skipped", 0), counts.get("failures", 0),
                 "" if out.ok else ": " + " | ".join(out.failures), extra=extra)
        if self.settings.debug_logs:
            log.info("%s: ansible output:\n%s", request.label, tail(result.artifact_dir / "stdout", DEBUG_OUTPUT),
                     extra=extra)
        elif not out.ok and not result.events:
            log.error("%s: ansible output:\n%s", request.label, tail(result.artifact_dir / "stdout"), extra=extra)
