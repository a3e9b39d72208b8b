"""Leader election with a coordination.k8s.io/v1 Lease, as client-go's leaderelection does it.

Expiry is judged by when *we* last saw the Lease change (local monotonic clock), never by comparing the
holder's timestamps with our clock, so clock skew between replicas cannot make two leaders. The leader
renews every retry period, each attempt bounded by what is left of the renew deadline (shorter than the
lease duration). A timer set at the last renewal's start plus the renew deadline declares the leadership
lost, whatever the renewals are doing, before anyone else may take the Lease; ``fresh`` turns false at that
moment even before the timer has run (a process that was stopped wakes up with its clock gone on), and the
operator's writes are fenced on it (``ApiSession.fence``). Then the operator stops every run and exits. A
graceful stop releases the Lease so that a standby takes over at once.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import os
import socket
import time
import uuid
from typing import Any

from . import metrics
from .config import GVK, RunConfig
from .kube import Kube, NotFound, Resource

log = logging.getLogger(__name__)

LEASES = GVK("coordination.k8s.io", "v1", "Lease")


def _micro_now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _namespace(cfg: RunConfig) -> str:
    if cfg.leader_election_namespace:
        return cfg.leader_election_namespace
    try:
        with open("/var/run/secrets/kubernetes.io/serviceaccount/namespace") as fh:
            return fh.read().strip()
    except OSError:
        pass
    return os.environ.get("POD_NAMESPACE") or "default"


class LeaderElector:
    def __init__(self, kube: Kube, cfg: RunConfig) -> None:
        self.kube = kube
        self.name = cfg.leader_election_id or "playbook-operator-lock"
        self.namespace = _namespace(cfg)
        self.identity = f"{os.environ.get('POD_NAME') or socket.gethostname()}_{uuid.uuid4()}"
        self.lease_duration = cfg.lease_duration
        self.renew_deadline = cfg.renew_deadline
        self.retry_period = cfg.retry_period
        self.is_leader = False
        self.lost = asyncio.Event()
        self._observed: tuple[str, float] | None = None  # (resourceVersion, when we saw it change)
        self._last_renew = 0.0  # when the last successful renewal was sent (monotonic)
        self._renewer: asyncio.Task[None] | None = None
        self._deadline: asyncio.TimerHandle | None = None
        self._taken = ""  # another holder, as last read
        self._res: Resource | None = None

    async def _resource(self) -> Resource:
        if self._res is None:
            self._res = await self.kube.discover(LEASES)
        return self._res

    async def _try(self) -> bool:
        """One attempt to acquire or renew. True when we hold the Lease afterwards."""
        self._taken = ""
        res = await self._resource()
        now = _micro_now()
        spec_mine = {"holderIdentity": self.identity, "leaseDurationSeconds": int(self.lease_duration),
                     "renewTime": now}
        try:
            lease = await self.kube.get(res, self.namespace, self.name)
        except NotFound:
            body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                    "metadata": {"name": self.name, "namespace": self.namespace},
                    "spec": {**spec_mine, "acquireTime": now, "leaseTransitions": 0}}
            try:
                created = await self.kube.create(res, self.namespace, body)
            except Exception:
                return False
            self._observed = (created["metadata"]["resourceVersion"], time.monotonic())
            return True
        spec = lease.get("spec") or {}
        rv = lease["metadata"]["resourceVersion"]
        if self._observed is None or self._observed[0] != rv:
            self._observed = (rv, time.monotonic())
        holder = spec.get("holderIdentity") or ""
        duration = float(spec.get("leaseDurationSeconds") or self.lease_duration)
        expired = time.monotonic() - self._observed[1] > duration
        if holder and holder != self.identity and not expired:
            self._taken = holder
            return False
        new_spec = dict(spec, **spec_mine)
        if holder != self.identity:
            new_spec["acquireTime"] = now
            new_spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + 1
        body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace, "resourceVersion": rv},
                "spec": new_spec}
        try:
            updated = await self.kube.request("PUT", res.path(self.namespace, self.name), body)
        except Exception:
            return False
        self._observed = (updated["metadata"]["resourceVersion"], time.monotonic())
        return True

    async def _attempt(self, timeout: float) -> bool:
        try:
            return await asyncio.wait_for(self._try(), timeout)
        except Exception as exc:
            log.debug("lease attempt failed: %s", exc)
            return False

    def _renewed(self, at: float) -> None:
        self._last_renew = at
        if self._deadline is not None:
            self._deadline.cancel()
        loop = asyncio.get_running_loop()
        self._deadline = loop.call_later(max(0.0, at + self.renew_deadline - time.monotonic()), self._expire)
        metrics.LEADER.labels(self.name).set(1)

    def _expire(self) -> None:
        if self.is_leader and not self.fresh():
            self._lose(f"could not renew lease {self.namespace}/{self.name} within {self.renew_deadline:.0f}s")

    def _lose(self, why: str) -> None:
        self.is_leader = False
        metrics.LEADER.labels(self.name).set(0)
        log.error("%s: leadership lost", why)
        self.lost.set()

    async def acquire(self, stopping: asyncio.Event) -> bool:
        """Waits until we hold the Lease (True) or the operator is stopping (False)."""
        metrics.LEADER.labels(self.name).set(0)
        while not stopping.is_set():
            started = time.monotonic()
            if await self._attempt(self.retry_period * 2):
                self.is_leader = True
                self._renewed(started)
                log.info("became the leader: %s holds lease %s/%s", self.identity, self.namespace, self.name)
                self._renewer = asyncio.create_task(self._renew_loop(), name="lease-renewer")
                return True
            try:
                await asyncio.wait_for(stopping.wait(), self.retry_period)
            except TimeoutError:
                pass
        return False

    def fresh(self) -> bool:
        """Whether we may act as the leader: we renewed within the renew deadline, so nobody else can hold the
        Lease yet (it can only be taken a whole lease duration after our last renewal)."""
        return self.is_leader and time.monotonic() - self._last_renew < self.renew_deadline

    async def _renew_loop(self) -> None:
        while self.is_leader:
            await asyncio.sleep(self.retry_period)
            started = time.monotonic()
            left = self._last_renew + self.renew_deadline - started
            if left <= 0:
                self._expire()
                return
            if await self._attempt(left):
                self._renewed(started)
            elif self._taken:
                self._lose(f"lease {self.namespace}/{self.name} is held by {self._taken}")
                return

    async def release(self) -> None:
        """Gives the Lease up (graceful stop) so that a standby need not wait for it to expire."""
        if self._renewer:
            self._renewer.cancel()
        if self._deadline is not None:
            self._deadline.cancel()
        if not self.fresh():  # lost, or no longer sure: the Lease may be someone else's
            self.is_leader = False
            return
        self.is_leader = False
        metrics.LEADER.labels(self.name).set(0)

        async def _release() -> None:
            res = await self._resource()
            lease: dict[str, Any] = await self.kube.get(res, self.namespace, self.name)
            if (lease.get("spec") or {}).get("holderIdentity") != self.identity:
                return
            lease["spec"].update({"holderIdentity": None, "leaseDurationSeconds": 1, "renewTime": _micro_now()})
            await self.kube.request("PUT", res.path(self.namespace, self.name), lease)

        try:
            await asyncio.wait_for(_release(), 5)
            log.info("released lease %s/%s", self.namespace, self.name)
        except Exception as exc:
            log.warning("could not release lease %s/%s: %s", self.namespace, self.name, exc)
