"""Leader election with a coordination.k8s.io/v1 Lease, as client-go's leaderelection does it.

Expiry is judged by when *we* last saw the Lease change (local monotonic clock), never by comparing the
holder's timestamps with our clock, so clock skew between replicas cannot make two leaders. The leader
renews every retry period; if it cannot renew within the renew deadline (shorter than the lease
duration) it declares itself lost before anyone else may take the Lease, and the operator stops every
run and exits. A graceful stop releases the Lease so that a standby takes over at once.
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
        self._last_renew = 0.0
        self._renewer: asyncio.Task[None] | None = None
        self._res: Resource | None = None

    async def _resource(self) -> Resource:
        if self._res is None:
            self._res = await self.kube.discover(LEASES)
        return self._res

    async def _try(self) -> bool:
        """One attempt to acquire or renew. True when we hold the Lease afterwards."""
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

    async def _attempt(self) -> bool:
        try:
            return await asyncio.wait_for(self._try(), self.retry_period * 2)
        except Exception as exc:
            log.debug("lease attempt failed: %s", exc)
            return False

    async def acquire(self, stopping: asyncio.Event) -> bool:
        """Waits until we hold the Lease (True) or the operator is stopping (False)."""
        while not stopping.is_set():
            if await self._attempt():
                self.is_leader = True
                self._last_renew = time.monotonic()
                log.info("became the leader: %s holds lease %s/%s", self.identity, self.namespace, self.name)
                self._renewer = asyncio.create_task(self._renew_loop(), name="lease-renewer")
                return True
            try:
                await asyncio.wait_for(stopping.wait(), self.retry_period)
            except TimeoutError:
                pass
        return False

    def fresh(self) -> bool:
        """Whether runs may start: we renewed within the renew deadline, so nobody else can hold the Lease
        yet (it can only be taken a whole lease duration after our last renewal)."""
        return self.is_leader and time.monotonic() - self._last_renew < self.renew_deadline

    async def _renew_loop(self) -> None:
        while self.is_leader:
            await asyncio.sleep(self.retry_period)
            if await self._attempt():
                self._last_renew = time.monotonic()
            elif time.monotonic() - self._last_renew > self.renew_deadline:
                self.is_leader = False
                log.error("could not renew lease %s/%s for %.0fs: leadership lost", self.namespace, self.name,
                          self.renew_deadline)
                self.lost.set()
                return

    async def release(self) -> None:
        """Gives the Lease up (graceful stop) so that a standby need not wait for it to expire."""
        if self._renewer:
            self._renewer.cancel()
        if not self.is_leader:
            return
        self.is_leader = False

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
