"""Starts everything for `playbook-operator run`: endpoints, leader election, the executor, one queue,
reconciler and watch per kind of watches.yaml; and stops it all gracefully on SIGTERM.

An event's path: the kind's reflectors (watching.py, reflector.py) → ObjectStore + WorkQueue (queue.py) →
Reconciler (reconcile.py) → Executor (execution/) → status.py / events.py.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import leader as leader_mod
from . import metrics, permissions
from .ansible import CALLBACK_DIR, COLLECTIONS_DIR
from .apisession import ApiSession
from .config import GVK, RunConfig, Watch
from .dependents import DependentRecords, DependentWatcher
from .execution import Executor
from .kopf_without_client import kopf
from .kube import Kube
from .ownership import Owner
from .proxy import OwnerProxy, OwnWrites
from .queue import CHANGE, Backoff, WorkQueue
from .queue import Outcome as QueueOutcome
from .reconcile import Reconciler, Settings
from .server import Endpoints, MetricsSecurity
from .watching import ObjectStore, PrimaryKind

log = logging.getLogger("playbook_operator")

# kubernetes.core modules that take a namespace: the CR's namespace becomes their default, as if the
# role had written `namespace: "{{ ansible_operator_meta.namespace }}"`. k8s_info is left out on
# purpose: without a namespace it lists across namespaces, and roles rely on that.
NAMESPACED_MODULES = (
    "kubernetes.core.k8s", "kubernetes.core.k8s_cp", "kubernetes.core.k8s_exec", "kubernetes.core.k8s_json_patch",
    "kubernetes.core.k8s_log", "kubernetes.core.k8s_rollback", "kubernetes.core.k8s_scale",
    "kubernetes.core.k8s_service", "operator_sdk.util.k8s_status", "operator_sdk.util.k8s_event",
)


def ansible_env(cfg: RunConfig) -> dict[str, str]:
    """The environment every run starts from (on top of the operator's own)."""
    collections = [str(COLLECTIONS_DIR)]
    user_collections = cfg.ansible_collections_path or os.environ.get("ANSIBLE_COLLECTIONS_PATH")
    collections.append(user_collections or f"{Path.home() / '.ansible/collections'}:/usr/share/ansible/collections")
    env = {
        "ANSIBLE_CALLBACK_PLUGINS": ":".join(filter(None, [str(CALLBACK_DIR), os.environ.get("ANSIBLE_CALLBACK_PLUGINS")])),
        "ANSIBLE_COLLECTIONS_PATH": ":".join(collections),
        # Scaffolded ansible-operator projects set this in their Deployment; facts cost a second per run.
        "ANSIBLE_GATHERING": os.environ.get("ANSIBLE_GATHERING", "explicit"),
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_LOCALHOST_WARNING": "False",
        "ANSIBLE_INVENTORY_UNPARSED_WARNING": "False",
        "ANSIBLE_PYTHON_INTERPRETER": sys.executable,
        "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}",
    }
    # As upstream: "If unset, roles are assumed to be in {{CWD}}/roles" (and ours: beside watches.yaml).
    default_roles = [str(Path.cwd() / "roles"), str(cfg.watches_file.resolve().parent / "roles")]
    roles_path = cfg.ansible_roles_path or os.environ.get("ANSIBLE_ROLES_PATH") or ":".join(dict.fromkeys(default_roles))
    env["ANSIBLE_ROLES_PATH"] = roles_path
    return env


def role_playbook(role: Path) -> list[dict[str, Any]]:
    return [{
        "hosts": "localhost",
        "module_defaults": {m: {"namespace": "{{ ansible_operator_meta.namespace }}"} for m in NAMESPACED_MODULES},
        "roles": [{"name": str(role)}],
    }]


def write_playbooks(watch: Watch, root: Path) -> dict[str, Path]:
    """The playbook each run of this watch executes: the user's own, or a one-role play around the role.
    Written once at start-up; it names the role by path, so edits to the role apply on the next run."""
    root.mkdir(parents=True, exist_ok=True)
    stem = f"{watch.gvk.group or 'core'}_{watch.gvk.version}_{watch.gvk.kind}"
    out: dict[str, Path] = {}

    def target(role: Path | None, playbook: Path | None, suffix: str) -> Path:
        if playbook:
            return playbook
        assert role is not None
        path = root / f"{stem}{suffix}.json"
        path.write_text(json.dumps(role_playbook(role), indent=2))
        return path

    out["main"] = target(watch.role, watch.playbook, "")
    if watch.finalizer and (watch.finalizer.role or watch.finalizer.playbook):
        out["finalizer"] = target(watch.finalizer.role, watch.finalizer.playbook, "_finalizer")
    return out


class ProxyEnvironment:
    """Every run talks to the API server through the owner-reference proxy, as the run's object."""

    def __init__(self, proxy: OwnerProxy) -> None:
        self.proxy = proxy

    def env_for(self, watch: Watch, obj: dict[str, Any], finalizer_run: bool) -> tuple[dict[str, str], Callable[[], None]]:
        meta = obj["metadata"]
        owner = Owner(obj["apiVersion"], obj["kind"], meta["name"], meta.get("namespace") or "", meta["uid"], watch.gvk,
                      inject=not finalizer_run)
        token, path = self.proxy.kubeconfig_for(owner)
        return {"K8S_AUTH_KUBECONFIG": str(path), "KUBECONFIG": str(path)}, lambda: self.proxy.release(token)


def make_executor(cfg: RunConfig, parallel: int) -> Executor:
    env = ansible_env(cfg)
    if cfg.executor == "cold":
        from .execution.cold import ColdExecutor

        return ColdExecutor(parallel, env)
    from .execution.warm import WarmExecutor

    return WarmExecutor(parallel, env)


class Operator:
    def __init__(self, cfg: RunConfig, watches: list[Watch]) -> None:
        self.cfg = cfg
        self.watches = watches
        self.stopping = asyncio.Event()
        self.primaries: list[PrimaryKind] = []
        self.leader: leader_mod.LeaderElector | None = None
        self.queues: list[WorkQueue] = []
        self.exit_code = 0

    def ready(self) -> bool:
        # A standby is ready too (as controller-runtime's readyz in the Go ansible-operator): were it not,
        # a Deployment's rolling update would wait forever for new pods that cannot lead until the old go.
        # The leader is ready once every kind of watches.yaml is served and listed (a CRD installed later
        # makes it ready then).
        standby = self.leader is not None and not self.leader.is_leader
        synced = bool(self.primaries) and all(p.synced for p in self.primaries)
        return not self.stopping.is_set() and (standby or synced)

    def _on_signal(self, signum: int) -> None:
        log.info("received %s: shutting down (grace %.0fs)", signal.Signals(signum).name,
                 self.cfg.graceful_shutdown_timeout)
        self.stopping.set()

    def _install_signals(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._on_signal, sig)

    async def run(self) -> int:
        cfg = self.cfg
        self._install_signals()
        try:
            api = await asyncio.to_thread(ApiSession.from_environment)
        except kopf.LoginError as exc:
            log.error("%s", exc)
            return 1
        api.start()
        unfenced = Kube(api, fenced=False)  # the Lease's own requests, and reviews that change nothing
        if cfg.required_permissions is not None:
            missing = await permissions.check(unfenced, cfg.required_permissions, cfg.watch_namespaces)
            if missing:
                log.error("not allowed to do what the roles do (%s): %s; grant them (e.g. apply the operator's RBAC "
                          "again) and start again", cfg.required_permissions, "; ".join(missing))
                await api.close()
                return 1
            log.info("every permission in %s is granted", cfg.required_permissions)
        endpoints = Endpoints(cfg.health_probe_bind_address, cfg.metrics_bind_address, self.ready,
                              MetricsSecurity(cfg.metrics_secure, unfenced if cfg.metrics_require_rbac else None))
        await endpoints.start()
        try:
            if cfg.leader_elect:
                self.leader = leader_mod.LeaderElector(unfenced, cfg)
                log.info("waiting to become the leader (lease %s/%s)", self.leader.namespace, self.leader.name)
                if not await self.leader.acquire(self.stopping):
                    return 0
                api.fence = self.leader.fresh  # no write goes out unless the lease is surely ours
            await self._lead(Kube(api))
        finally:
            if self.leader is not None:
                await self.leader.release()
            await endpoints.stop()
            await api.close()
        return self.exit_code

    def _serve(self, watch: Watch, api: ApiSession, kube: Kube, executor: Executor, global_cap: asyncio.Semaphore,
               run_env: ProxyEnvironment, records: DependentRecords,
               playbooks: dict[str, Path]) -> tuple[WorkQueue, PrimaryKind]:
        """One kind's queue, reconciler, cache and watch: changes the cache sees queue the reconciler's runs."""
        cfg = self.cfg

        async def reconcile(key: tuple[str, str], reasons: frozenset[str]) -> QueueOutcome:
            return await reconciler(key, reasons)

        queue = WorkQueue(name=watch.gvk.kind, workers=watch.max_concurrent_reconciles, handler=reconcile,
                          global_cap=global_cap, backoff=Backoff(cfg.retry_backoff_base, cfg.retry_backoff_max),
                          may_run=self.leader.fresh if self.leader else (lambda: True),
                          controller=metrics.controller_name(watch.gvk))
        store = ObjectStore(watch, queue)
        primary = PrimaryKind(api, kube, watch, store, cfg.watch_namespaces)
        settings = Settings(cfg.reconcile_period, cfg.artifacts_dir, cfg.ansible_args, cfg.ansible_log_events,
                            cfg.run_timeout, cfg.ansible_debug_logs)
        reconciler = Reconciler(watch, primary, settings, kube, executor, store, playbooks, run_env, records)
        self.primaries.append(primary)
        self.queues.append(queue)
        queue.start()
        return queue, primary

    async def _lead(self, kube: Kube) -> None:
        cfg = self.cfg
        total_workers = sum(w.max_concurrent_reconciles for w in self.watches)
        cap = cfg.max_concurrent_runs or total_workers
        executor = make_executor(cfg, cap)
        await executor.start()
        global_cap = asyncio.Semaphore(cap)
        playbook_root = cfg.artifacts_dir / "_playbooks"
        api = kube.api
        by_gvk: dict[GVK, tuple[Watch, WorkQueue, PrimaryKind]] = {}

        def enqueue_owner(gvk: GVK, key: tuple[str, str]) -> None:
            if gvk in by_gvk:
                by_gvk[gvk][1].add(key, CHANGE)

        def owner_namespaced(gvk: GVK) -> bool:
            res = by_gvk[gvk][2].resource if gvk in by_gvk else None
            return res.namespaced if res is not None else True

        own_writes = OwnWrites()
        watcher = DependentWatcher(api, self.watches, cfg.watch_namespaces, own_writes, enqueue_owner,
                                   owner_namespaced)
        records = DependentRecords(kube, lambda gvk: by_gvk[gvk][2].get())
        proxy = OwnerProxy(api, cfg.inject_owner_ref, watcher, records, own_writes, port=cfg.proxy_port)
        await proxy.start()
        run_env = ProxyEnvironment(proxy)
        serving: list[asyncio.Task[None]] = []
        for watch in self.watches:
            queue, primary = self._serve(watch, api, kube, executor, global_cap, run_env, records,
                                         write_playbooks(watch, playbook_root))
            by_gvk[watch.gvk] = (watch, queue, primary)
            serving.append(asyncio.create_task(primary.run(), name=f"watch-{watch.gvk.kind}"))
            log.info("watching %s with %s (%d workers)", watch.gvk, watch.target, watch.max_concurrent_reconciles)

        async def mark_ready() -> None:
            await asyncio.gather(*(p.wait_synced() for p in self.primaries))
            log.info("operator ready: %d kind(s) watched, executor %s, at most %d runs at once",
                     len(self.watches), executor.name, cap)

        ready_task = asyncio.create_task(mark_ready())
        stop_wait = asyncio.create_task(self.stopping.wait())
        lost = asyncio.create_task(self.leader.lost.wait()) if self.leader else None
        done, _ = await asyncio.wait([stop_wait] + ([lost] if lost else []), return_when=asyncio.FIRST_COMPLETED)
        if lost in done:
            log.error("lost the leader lease: stopping every run now so that no two leaders run roles")
            self.exit_code = 1
            grace: float | None = 0.0
        else:  # negative: as long as runs take (each is bounded by its run timeout), as controller-runtime
            grace = cfg.graceful_shutdown_timeout if cfg.graceful_shutdown_timeout >= 0 else None
        self.stopping.set()
        finished = await asyncio.gather(*(q.shutdown(grace) for q in self.queues))
        if not all(finished):
            log.warning("runs still in progress after %.0fs were cancelled", grace or 0)
        for t in (*serving, ready_task, stop_wait, lost):
            if t is not None and not t.done():
                t.cancel()
        await asyncio.gather(*serving, return_exceptions=True)
        await executor.stop()
        await watcher.stop()
        await proxy.stop()
