"""Who is the primary of a SampleDB, and how it changes without ever making two.

A change of primary (failover or switchover) has two steps, recorded in the primary Lease so that an
operator restarted in between carries on where it was:

1. fence: the old primary is relabelled ``replica`` (its entrypoint stops its server in fast mode, which
   sends the replicas every WAL record it wrote) and the Lease names nobody;
2. promote: once the old primary is known to accept no more writes, the new one is labelled ``primary``
   and named in the Lease.

"Known to accept no more writes" is read from the pod, never from readiness (an unready primary may still
be serving its open sessions): the pod is gone, or is another pod of the same name, or its server container
is not running, or was started after the fence began (it read its new label). A primary that does not stop
by itself within the fence timeout has its pod deleted, so the kubelet stops it.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

FENCING = "sampledb.example.com/fencing"
FENCING_UID = "sampledb.example.com/fencing-uid"
FENCING_SINCE = "sampledb.example.com/fencing-since"
PROMOTE = "sampledb.example.com/promote"
REASON = "sampledb.example.com/change-reason"
# async mode: the primary's WAL position as last seen, what a failover measures a replica's lag against
PRIMARY_LSN = "sampledb.example.com/primary-lsn"
CHANGE_KEYS = (FENCING, FENCING_UID, FENCING_SINCE, PROMOTE, REASON)
SERVER_CONTAINER = "postgres"
ROLE_LABEL = "sampledb.example.com/role"
TIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"


def _ordinal(name: str) -> int:
    match = re.search(r"-(\d+)$", name)
    return int(match.group(1)) if match else -1


def _time(text: str | None) -> datetime | None:
    if not text:
        return None
    return datetime.strptime(text, TIME_FORMAT).replace(tzinfo=UTC)


def _server_status(pod: dict) -> dict | None:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return next((c for c in statuses if c.get("name") == SERVER_CONTAINER), None)


def sampledb_fenced(pods: list[dict], name: str, uid: str, since: str) -> bool:
    """True when the server that was pod ``name`` (with ``uid``) when the fence began at ``since`` can accept
    no more writes: that pod is gone or replaced, its server container is not running, or the one running
    was started after ``since`` (so it read its replica label when it started)."""
    pod = next((p for p in pods or [] if p["metadata"]["name"] == name), None)
    if pod is None or (uid and pod["metadata"].get("uid") != uid):
        return True
    server = _server_status(pod)
    if server is None:
        return True  # never started: nothing running to fence
    running = (server.get("state") or {}).get("running")
    if running is None:
        return True
    started, fence_began = _time(running.get("startedAt")), _time(since)
    return started is not None and fence_began is not None and started > fence_began


def sampledb_plan_fenced(pods: list[dict], plan: dict) -> bool:
    """True when the primary the plan is fencing can accept no more writes (sampledb_fenced, with the pod's uid
    and the time the fence began as the plan recorded them)."""
    annotations = plan.get("annotations") or {}
    return bool(plan.get("fencing")) and sampledb_fenced(pods, plan["fencing"], annotations.get(FENCING_UID, ""),
                                                         annotations.get(FENCING_SINCE, ""))


def sampledb_lsn(text) -> int | None:
    """A WAL position as PostgreSQL prints it ('16/B374D848') as a number, None when there is none."""
    match = re.fullmatch(r"\s*([0-9A-Fa-f]{1,8})/([0-9A-Fa-f]{1,8})\s*", str(text or ""))
    return (int(match.group(1), 16) << 32 | int(match.group(2), 16)) if match else None


def sampledb_leader_plan(pods, lease, now, ready, unready_since=None, grace_seconds=10, switchover_to="",
                         switchover_reason="upgrade", requested="", database="", hold=False,
                         fence_timeout_seconds=30, positions=None, max_lag=None, fenced=""):
    """What the leader role does in this run. ``pods`` are the database's server pods, ``lease`` its primary
    Lease ({} when there is none), ``ready`` the names of the pods that can serve (the sampledb_ready test),
    ``now`` and ``unready_since`` UTC times as '%Y-%m-%dT%H:%M:%SZ'.
    ``switchover_to`` asks for that server as the primary once it is Ready (``switchover_reason`` says who
    asks); ``requested`` is a user's request for a switchover to that server of ``database``, refused unless it
    is Ready; ``hold`` keeps an unready primary that is being restarted on purpose. ``positions`` are the
    replicas' WAL positions (name → '16/B374D848', as far as each has received or replayed): a failover
    promotes the most advanced Ready one (which has every commit a synchronous primary acknowledged), the
    lowest ordinal among equals or when they are not known. ``positions`` None means not read yet.
    ``max_lag`` (bytes, None for no bound: sync mode) bounds a failover in async mode: it begins only if the
    most advanced Ready replica is at most that far behind the primary's position recorded in the Lease
    (PRIMARY_LSN); else the primary is kept, to come back with its data (Patroni's maximum_lag_on_failover).
    ``fenced`` names a pod whose server was seen stopped for its replica label (its fence's mark, read by exec:
    fenced.sh), before its pod's status shows it.

    Returns a dict:
      target       the pod to label primary after this run ('' while a fence is in progress)
      current      the primary before this run ('' at first start), or the one being fenced
      fencing      the pod being fenced ('' when none)
      promote      the pod to promote once it is fenced
      annotations  the Lease's change annotations to write (all of CHANGE_KEYS, '' when not in a change)
      holder       the Lease's holderIdentity to write
      changed      a new primary was promoted in this run
      began        a change of primary began in this run
      reason       failover | switchover | upgrade, for a change in progress or just made
      evict        the old primary's pod to delete (it did not stop within the fence timeout)
      message      what is happening, for status and Events
      refused      why ``requested`` cannot be done ('' when it can, or when nothing was requested)
      positions    the WAL positions a promotion in this run was chosen on ('' when none were known)
      blocked      why a failover that is due does not begin: every Ready replica is too far behind ('' if not)
    """
    pods = sorted(pods or [], key=lambda p: _ordinal(p["metadata"]["name"]))
    names = [p["metadata"]["name"] for p in pods]
    by_name = {p["metadata"]["name"]: p for p in pods}
    serving = set(ready or [])
    ready = [n for n in names if n in serving]  # in ordinal order
    annotations = dict(((lease or {}).get("metadata") or {}).get("annotations") or {})
    holder = ((lease or {}).get("spec") or {}).get("holderIdentity") or ""
    fencing = annotations.get(FENCING, "")
    no_change = {k: "" for k in CHANGE_KEYS}
    refused = ("" if not requested or requested in ready
               else f"{requested} is not a server of {database} (its servers: {', '.join(names)})"
               if requested not in names else f"{requested} is not Ready")
    if not switchover_to and requested and not refused:
        switchover_to, switchover_reason = requested, "switchover"
    plan = {"target": holder, "current": holder, "fencing": "", "annotations": no_change, "holder": holder,
            "changed": False, "began": False, "promote": "", "reason": "", "evict": "", "message": "",
            "refused": refused, "positions": "", "blocked": ""}

    lsn = {name: n for name, text in (positions or {}).items() if (n := sampledb_lsn(text)) is not None}
    # what the choice was made on, for the Event
    known = ("WAL positions: " + ", ".join(f"{n} {positions[n]}" for n in sorted(lsn, key=_ordinal))) if lsn else ""

    def candidate(excluded: str, wanted: str = "", reason: str = "failover") -> str:
        others = [n for n in ready if n != excluded]
        if reason == "failover" and any(n in lsn for n in others):
            # max() keeps the first of equals: the lowest ordinal; a server whose position is unknown comes last
            return max(others, key=lambda n: lsn.get(n, -1))
        if wanted and wanted in others:
            return wanted
        return next(iter(others), "")

    def fence(old: str, new: str, reason: str, since: str, uid: str, stopped: bool = False) -> dict:
        if (stopped or sampledb_fenced(pods, old, uid, since)) and new:
            return {**plan, "target": new, "current": old, "holder": new, "changed": True, "reason": reason,
                    "positions": known, "message": f"{old} has stopped; promoted {new}"
                    + (f" ({known})" if known else "")}
        waited = (_time(now) - _time(since)).total_seconds() if _time(since) else 0
        evict = old if old in by_name and waited >= fence_timeout_seconds else ""
        message = (f"waiting for {old} to stop accepting writes before promoting {new or 'a Ready replica'}"
                   + (f"; it did not stop within {fence_timeout_seconds}s, so its pod is deleted" if evict else ""))
        return {**plan, "target": "", "current": old, "holder": "", "fencing": old, "promote": new, "reason": reason,
                "evict": evict, "message": message,
                "annotations": {FENCING: old, FENCING_UID: uid, FENCING_SINCE: since, PROMOTE: new,
                                REASON: reason}}

    if fencing:
        # A change in progress: promote once the old primary has stopped, to the chosen server if it is
        # still Ready, else to another Ready one.
        reason = annotations.get(REASON, "failover")
        new = candidate(fencing, annotations.get(PROMOTE, ""), reason)
        return fence(fencing, new, reason, annotations.get(FENCING_SINCE, now), annotations.get(FENCING_UID, ""),
                     stopped=bool(fenced) and fenced == fencing)

    if not holder:
        # First start: the lowest ordinal, once it exists.
        first = names[0] if names else ""
        return {**plan, "target": first, "holder": first, "current": ""}

    def begin(new: str, reason: str) -> dict:
        meta = (by_name.get(holder) or {}).get("metadata") or {}
        # A new pod of the primary's name (the old one was deleted) that was never labelled: its entrypoint
        # waits for a label before it starts a server, so there is nothing to stop.
        never_labelled = bool(meta) and ROLE_LABEL not in (meta.get("labels") or {})
        return {**fence(holder, new, reason, now, meta.get("uid", ""), stopped=never_labelled), "began": True}

    wanted = switchover_to or ""
    if wanted and wanted != holder and wanted in ready:
        return begin(wanted, switchover_reason)
    if holder in ready or hold:
        return plan
    grace_over = unready_since and (_time(now) - _time(unready_since)).total_seconds() >= float(grace_seconds)
    if not grace_over:
        return plan
    new = candidate(holder)
    if not new:
        return {**plan, "message": f"primary {holder} is not Ready and no replica is Ready to take over"}
    reference = sampledb_lsn(annotations.get(PRIMARY_LSN))
    if max_lag not in (None, "") and reference is not None and positions is not None:
        behind = reference - lsn[new] if new in lsn else None
        if behind is None or behind > int(max_lag):
            blocked = (f"primary {holder} is not Ready, and no replica is promoted: "
                       + (f"the most advanced, {new}, is {behind} bytes behind" if behind is not None
                          else "no replica's WAL position could be read, so none is known to be within")
                       + f" its last recorded position {annotations[PRIMARY_LSN]}"
                       + f" (spec.replication.maximumLagOnFailover: {int(max_lag)} bytes"
                       + (f"; {known}" if known else "") + f"); {holder} stays the primary")
            return {**plan, "message": blocked, "blocked": blocked}
    return begin(new, "failover")


def sampledb_lsn_to_record(lease, result, max_lag) -> dict[str, str]:
    """The Lease annotation to write with the primary's position (``result``: the k8s_exec of
    pg_current_wal_lsn() on it), or {} to leave it: it is written once the position has moved a quarter of
    ``max_lag`` past the recorded one, or gone back (a new database history: a major upgrade's load), so a
    busy database's resyncs do not write the Lease every time."""
    if not isinstance(result, dict) or not _exec_ok(result) or max_lag in (None, ""):
        return {}
    current = (result.get("stdout") or "").strip()
    recorded = (((lease or {}).get("metadata") or {}).get("annotations") or {}).get(PRIMARY_LSN)
    old, new = sampledb_lsn(recorded), sampledb_lsn(current)
    if new is None:
        return {}
    if old is None or new < old or new - old >= max(int(max_lag) // 4, 1):
        return {PRIMARY_LSN: current}
    return {}


def sampledb_plan_settled(plan: dict, pods, lease, requested: str = "", max_lag=None, labels=None) -> bool:
    """True when the plan changes nothing: it keeps the primary the Lease names, no change of primary is
    in progress, asked for, refused or blocked, the Lease records no change and carries ``labels``, and every
    server is labelled as it should be. Async mode (``max_lag``) is never settled: each run may record the
    primary's WAL position. Most runs are settled, and skip the steps of a change."""
    target = plan.get("target") or ""
    if max_lag not in (None, "") or requested or not target or plan.get("holder") != target:
        return False
    if any(plan.get(k) for k in ("fencing", "promote", "evict", "changed", "began", "refused", "blocked")):
        return False
    meta = (lease or {}).get("metadata") or {}
    if ((lease or {}).get("spec") or {}).get("holderIdentity") != target:
        return False
    if any(k in (meta.get("annotations") or {}) for k in CHANGE_KEYS):
        return False
    if any((meta.get("labels") or {}).get(k) != v for k, v in (labels or {}).items()):
        return False
    return all(((p["metadata"].get("labels") or {}).get(ROLE_LABEL))
               == ("primary" if p["metadata"]["name"] == target else "replica") for p in pods or [])


def _exec_ok(result: dict) -> bool:
    # (with failed_when: false a module error is not "failed": it has no stdout, only msg)
    return (not result.get("skipped") and not result.get("failed") and "stdout" in result
            and result.get("rc", result.get("return_code", 0)) == 0)


def sampledb_exec_output(results) -> dict[str, str]:
    """{item: stdout} of a k8s_exec loop's results that ran and succeeded (others are left out)."""
    return {r["item"]: (r.get("stdout") or "").strip() for r in results or [] if _exec_ok(r)}


def sampledb_exec_errors(results) -> list[str]:
    """'item: why' for each k8s_exec of the loop that ran and did not succeed."""
    return [f"{r['item']}: {(r.get('msg') or r.get('stderr') or 'exit status ' + str(r.get('rc'))).strip()}"
            for r in results or [] if not r.get("skipped") and not _exec_ok(r)]


class FilterModule:
    def filters(self):
        return {"sampledb_leader_plan": sampledb_leader_plan, "sampledb_fenced": sampledb_fenced,
                "sampledb_plan_fenced": sampledb_plan_fenced, "sampledb_plan_settled": sampledb_plan_settled,
                "sampledb_lsn": sampledb_lsn, "sampledb_lsn_to_record": sampledb_lsn_to_record,
                "sampledb_exec_output": sampledb_exec_output,
                "sampledb_exec_errors": sampledb_exec_errors}
