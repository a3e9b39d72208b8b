"""The status the runtime writes (manageStatus: true), in the Go ansible-operator's shape.

Before a run: ``Running=True`` (Running, "Running reconciliation"), ``Successful=False``.
After success: ``Running=True`` (Successful, "Awaiting next reconciliation", with ansibleResult),
``Successful=True``, ``Failure=False``. After failure: ``Running=False``, ``Failure=True`` (Failed, the
failed tasks' messages, with ansibleResult), ``Successful=False``. Plus ``observedGeneration``.

Every write reads the newest object, changes only ``conditions`` and ``observedGeneration`` (custom
status written by the role survives), carries the resourceVersion it read (a concurrent writer gives
409 and we read again instead of clobbering), and is skipped when it would change nothing.
"""

from __future__ import annotations

import copy
import datetime as dt
import logging
from typing import Any

from .kube import MERGE_PATCH, Gone, Kube, NotFound, Resource, is_conflict

log = logging.getLogger(__name__)

RUNNING, SUCCESSFUL, FAILURE = "Running", "Successful", "Failure"
RUNNING_MESSAGE = "Running reconciliation"
AWAITING_MESSAGE = "Awaiting next reconciliation"
SUCCESSFUL_MESSAGE = "Last reconciliation succeeded"
CONFLICT_RETRIES = 8
# A condition's message is for people: a failure message of megabytes (a role quoting its own status back,
# growing with each run) would make the object too large to store, and the status could never be written.
MAX_MESSAGE = 32 * 1024


def now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def condition(ctype: str, status: str, reason: str = "", message: str = "",
              ansible_result: dict[str, Any] | None = None) -> dict[str, Any]:
    c: dict[str, Any] = {"type": ctype, "status": status, "reason": reason, "message": message}
    if ansible_result is not None:
        c["ansibleResult"] = ansible_result
    return c


def get_condition(conditions: list[dict[str, Any]], ctype: str) -> dict[str, Any] | None:
    return next((c for c in conditions if isinstance(c, dict) and c.get("type") == ctype), None)


def set_condition(conditions: list[dict[str, Any]], new: dict[str, Any]) -> list[dict[str, Any]]:
    """Replaces the condition of the same type; lastTransitionTime moves only when status changes."""
    old = get_condition(conditions, new["type"])
    new = dict(new)
    if old is not None and old.get("status") == new["status"] and old.get("lastTransitionTime"):
        new["lastTransitionTime"] = old["lastTransitionTime"]
    else:
        new["lastTransitionTime"] = now()
    if old is not None and _same(old, new, ignore_result=False):
        return conditions
    return [c for c in conditions if not (isinstance(c, dict) and c.get("type") == new["type"])] + [new]


def _same(a: dict[str, Any], b: dict[str, Any], ignore_result: bool) -> bool:
    def norm(c: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in c.items() if k != "lastTransitionTime" and not (ignore_result and k == "ansibleResult")}

    return norm(a) == norm(b)


def conditions_equivalent(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> bool:
    """Equal but for transition times and the run's counts (ansibleResult): the test for "an idle resync
    writes nothing". A resync that succeeds as the last run did changes nothing a user acts on; its counts
    differ from the creating run's (nothing left to create) and would cost a write per object per resync."""
    if len(a) != len(b):
        return False
    for ca in a:
        cb = get_condition(b, ca.get("type", ""))
        if cb is None or not _same(ca, cb, ignore_result=True):
            return False
    return True


def running(conditions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = list(conditions)
    if get_condition(out, SUCCESSFUL) is not None:
        out = set_condition(out, condition(SUCCESSFUL, "False"))
    return set_condition(out, condition(RUNNING, "True", "Running", RUNNING_MESSAGE))


def done(conditions: list[dict[str, Any]], ok: bool, ansible_result: dict[str, Any] | None,
         failures: list[str]) -> list[dict[str, Any]]:
    out = list(conditions)
    if ok:
        out = set_condition(out, condition(RUNNING, "True", "Successful", AWAITING_MESSAGE, ansible_result))
        out = set_condition(out, condition(SUCCESSFUL, "True", "Successful", SUCCESSFUL_MESSAGE))
        out = set_condition(out, condition(FAILURE, "False"))
    else:
        if get_condition(out, RUNNING) is not None:
            out = set_condition(out, condition(RUNNING, "False", "Failed", "Reconciliation failed"))
        out = set_condition(out, condition(FAILURE, "True", "Failed", bounded("\n".join(failures)), ansible_result))
        out = set_condition(out, condition(SUCCESSFUL, "False"))
    return out


def bounded(message: str) -> str:
    if len(message) <= MAX_MESSAGE:
        return message
    cut = len(message) - MAX_MESSAGE
    return f"{message[:MAX_MESSAGE]}... ({cut} more characters in the operator's log)"


def is_failed(obj: dict[str, Any]) -> bool:
    c = get_condition((obj.get("status") or {}).get("conditions") or [], FAILURE)
    return bool(c and c.get("status") == "True")


class StatusWriter:
    def __init__(self, kube: Kube) -> None:
        self.kube = kube

    async def update(self, res: Resource, namespace: str, name: str, uid: str, change, *,
                     observed_generation: int | None = None, skip_if_equivalent: bool = False,
                     current: dict[str, Any] | None = None) -> dict[str, Any] | None:
        """Applies ``change(conditions) -> conditions`` to the newest version of the object ``uid``.
        ``current``, a copy the caller has just read, saves the first read; a conflict means a newer one.
        Returns the written object, or None when nothing was written (unchanged). Raises Gone when the object
        is gone, or another object has its name: a status is never written to an object it is not about."""
        for _ in range(CONFLICT_RETRIES):
            if current is not None:
                obj, current = current, None
            else:
                try:
                    obj = await self.kube.get(res, namespace, name)
                except NotFound:
                    raise Gone() from None
            if obj["metadata"].get("uid") != uid:
                raise Gone()
            status = obj.get("status") if isinstance(obj.get("status"), dict) else {}
            old = [c for c in status.get("conditions") or [] if isinstance(c, dict)]
            new = change(copy.deepcopy(old))
            gen_changed = observed_generation is not None and status.get("observedGeneration") != observed_generation
            if new == old and not gen_changed:
                return None
            if skip_if_equivalent and not gen_changed and conditions_equivalent(old, new):
                return None
            patch: dict[str, Any] = {"metadata": {"resourceVersion": obj["metadata"]["resourceVersion"]},
                                     "status": {"conditions": new}}
            if observed_generation is not None:
                patch["status"]["observedGeneration"] = observed_generation
            try:
                return await self.kube.patch(res, namespace, name, patch, MERGE_PATCH,
                                             subresource="status" if res.has_status else None)
            except NotFound:
                raise Gone() from None
            except Exception as exc:
                if is_conflict(exc):
                    continue
                raise
        raise RuntimeError(f"status of {res.gvk.kind} {namespace}/{name}: still conflicting after "
                           f"{CONFLICT_RETRIES} attempts")
