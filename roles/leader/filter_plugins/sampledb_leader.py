"""Who is the primary of a SampleDB, and how it changes without ever making two or losing an acknowledged write.

The primary is named in the database's Lease (holderIdentity), stamped with the SampleDB's UID: a Lease left by an
earlier database of the same name is not this one's. A change of primary (failover, switchover, or the recovery of a
lost Lease) has two steps, recorded in the Lease so that an operator restarted in between carries on:

1. fence: the old primary is relabelled ``replica`` (its entrypoint stops its server in fast mode, which sends the
   replicas every WAL record it wrote) and the Lease names nobody;
2. promote: once the old primary is known to take no more writes, the chosen server is labelled ``primary`` and
   named in the Lease.

"Known to take no more writes" is read from the pod, never from readiness (an unready primary may still be serving
its open sessions): the pod is gone or replaced, or its server container is not running, or its fence's mark is there
(fenced.sh, by exec: entrypoint.sh writes it under a lock once no server of that pod can take writes while the label
says replica). A primary whose stop cannot be seen (its node powered off, its kubelet dead, cut off) counts as stopped
once its term has run out, without its kubelet's word; one that is seen running and does not stop by itself within
the fence timeout has its pod deleted.

The term: each server pod's Lease agent reads the Lease, and a primary runs only while a read sent less than
LEASE_TERM_SECONDS ago named it (entrypoint.sh; its server is ended FENCE_STOP_SECONDS later if it has not stopped).
Once the Lease names nobody (the fence's write), every later read says so; so the old primary takes no writes once
the write's time, its term, its stop time and a margin for clocks have passed, even when nothing can be read from its
node (powered off, its kubelet dead, cut off). That holds only for a pod that knows it is one of several servers (a
single server keeps running without the Lease): the Lease records (PRIMARY_TERM) the pod uid, term and stop time of a
primary that was first labelled primary while the database had several servers, and only for that pod is a term
taken as proof.

Whom to promote is read from the servers themselves (state.sh, by exec): their database's system identifier,
timeline and WAL position. A failover promotes the most advanced replica; in sync mode only once every other
server's position is known (with a quorum of one, any replica may hold the last acknowledged commit), in async mode
only within ``maximumLagOnFailover`` of the primary's last recorded position. Without the data it needs, a decision
fails closed: nobody is promoted, and the plan says why.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

FENCING = "sampledb.example.com/fencing"
FENCING_UID = "sampledb.example.com/fencing-uid"
FENCING_SINCE = "sampledb.example.com/fencing-since"
PROMOTE = "sampledb.example.com/promote"
REASON = "sampledb.example.com/change-reason"
# the SampleDB this Lease belongs to
DATABASE_UID = "sampledb.example.com/database-uid"
# since when the primary the Lease names has not been Ready (the failover grace period runs from it)
UNREADY_SINCE = "sampledb.example.com/primary-unready-since"
# async mode: the primary's WAL position as last seen, what a failover measures a replica's lag against
PRIMARY_LSN = "sampledb.example.com/primary-lsn"
# a time, in a run that read the Lease with the fence in it, after the fence's write (its upper bound)
FENCING_WRITTEN = "sampledb.example.com/fencing-written"
# "<pod uid> <term seconds> <stop seconds>" of the primary, when its pod enforces the term (see above)
PRIMARY_TERM = "sampledb.example.com/primary-term"
CHANGE_KEYS = (FENCING, FENCING_UID, FENCING_SINCE, FENCING_WRITTEN, PROMOTE, REASON)
# what the plan writes on every run (PRIMARY_LSN is written separately, when it moved enough)
PLANNED_KEYS = (*CHANGE_KEYS, DATABASE_UID, UNREADY_SINCE, PRIMARY_TERM)
SERVER_CONTAINER = "postgres"
ROLE_LABEL = "sampledb.example.com/role"
# the servers' instructions (role.sh reads them from its pod's annotations)
INSTRUCTION_PREFIX = "sampledb.example.com/"
INSTRUCTIONS = ("bootstrap", "upgrade-from", "upgrade-rollback", "fence", "synchronous-standby-names", "servers")
TIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"
RECOVERY = "recovery"  # the reason of a change that rebuilds a lost Lease


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


def _labelled(pod: dict) -> str:
    return ((pod.get("metadata") or {}).get("labels") or {}).get(ROLE_LABEL, "")


def _term_of(pod: dict) -> tuple[int, int] | None:
    """(term, stop) seconds the pod's server enforces (its LEASE_TERM_SECONDS and FENCE_STOP_SECONDS), or None."""
    container = next((c for c in ((pod.get("spec") or {}).get("containers") or [])
                      if c.get("name") == SERVER_CONTAINER), None)
    env = {e.get("name"): e.get("value") for e in (container or {}).get("env") or []}
    term, stop = str(env.get("LEASE_TERM_SECONDS") or ""), str(env.get("FENCE_STOP_SECONDS") or "10")
    if not (term.isdigit() and stop.isdigit() and int(term) > 0):
        return None
    return int(term), int(stop)


def _term_record(plan: dict, by_name: dict, recorded: str, replicas: int) -> str:
    """PRIMARY_TERM after this run: set for a primary being labelled so while the database has several servers (its
    server reads that from the same update of its pod as its label), kept while it stays the primary (or is being
    fenced) and the database has several servers, else ''. A pod already labelled primary gets none: it may have
    started when the database had one server, and not know better (its kubelet may be the one that is cut off)."""
    if replicas <= 1:
        return ""
    if plan.get("fencing"):
        return recorded
    pod = by_name.get(plan.get("holder") or "")
    if pod is None:
        return ""
    uid = pod["metadata"].get("uid") or ""
    if recorded.split()[:1] == [uid]:
        return recorded
    term = _term_of(pod)
    return f"{uid} {term[0]} {term[1]}" if uid and term and _labelled(pod) != "primary" else ""


def sampledb_fenced(pods: list[dict], name: str, uid: str, since: str = "") -> bool:
    """True when the server that was pod ``name`` (with ``uid``) when the fence began can take no more writes, as
    its pod shows it: that pod is gone or replaced. (A container that is not running, or restarted, is no proof:
    it starts again, and may read its old label before the kubelet writes the new one; its fence's mark, read by
    exec, is proof, and a stopped container's pod is deleted at once: sampledb_container_stopped.) ``since`` is
    unused."""
    pod = _pod(pods, name)
    return pod is None or bool(uid and pod["metadata"].get("uid") != uid)


def _pod(pods: list[dict], name: str) -> dict | None:
    return next((p for p in pods or [] if p["metadata"]["name"] == name), None)


def sampledb_container_stopped(pods: list[dict], name: str) -> bool:
    """Whether pod ``name``'s server container is not running (never started, or between restarts)."""
    pod = _pod(pods, name)
    server = _server_status(pod) if pod else None
    return pod is not None and (server is None or (server.get("state") or {}).get("running") is None)


def sampledb_plan_fenced(pods: list[dict], plan: dict) -> bool:
    """True when the primary the plan is fencing can take no more writes (sampledb_fenced, with the pod's uid as
    the plan recorded it)."""
    annotations = plan.get("annotations") or {}
    return bool(plan.get("fencing")) and sampledb_fenced(pods, plan["fencing"], annotations.get(FENCING_UID, ""))


def sampledb_lsn(text) -> int | None:
    """A WAL position as PostgreSQL prints it ('16/B374D848') as a number, None when there is none."""
    match = re.fullmatch(r"\s*([0-9A-Fa-f]{1,8})/([0-9A-Fa-f]{1,8})\s*", str(text or ""))
    return (int(match.group(1), 16) << 32 | int(match.group(2), 16)) if match else None


def sampledb_state(text) -> dict[str, str]:
    """state.sh's line (key=value pairs) as a dict."""
    return dict(kv.split("=", 1) for kv in str(text or "").split() if "=" in kv)


def _progress(state: dict) -> tuple[int, int]:
    """How far a server's WAL goes, to compare servers: its timeline first (a promoted server's history supersedes
    the one it left), then its position."""
    return (int(state.get("timeline") or 0), sampledb_lsn(state.get("lsn")) or -1)


def sampledb_fence_wait(plan: dict, now: str, wait_seconds, fence_timeout_seconds) -> int:
    """How long a run waits for the old primary the plan is fencing to stop: ``wait_seconds``, or, in a run after the
    one that began the change, until its term is over (``term_end``) if that comes later (an old primary whose node is
    lost never shows its stop: the run then promotes on the term without leaving it to the next), never longer than
    the fence timeout. (The run that begins a change keeps its usual wait, so that status says it is under way.)"""
    end = None if plan.get("began") else _time(plan.get("term_end"))
    until_end = int((end - _time(now)).total_seconds()) + 1 if end and _time(now) else 0
    return max(0, min(max(int(wait_seconds), until_end), int(fence_timeout_seconds)))


def _leader_plan(pods, lease, now, ready, unready_since=None, grace_seconds=10, switchover_to="",
                         switchover_reason="upgrade", requested="", database="", hold=False,
                         fence_timeout_seconds=30, positions=None, max_lag=None, fenced="", uid="",
                         initialized=False, states=None, quorum=0, replicas=None, identity="",
                         switchover_max_lag=16 * 1024 * 1024, fenced_lsn="", term_margin_seconds=3):
    """What the leader role does in this run.

    ``pods`` are the database's server pods, ``lease`` its primary Lease ({} when there is none), ``ready`` the
    names of the pods that can serve (the sampledb_ready test), ``now`` a UTC time as '%Y-%m-%dT%H:%M:%SZ'. ``uid``
    is the SampleDB's; ``initialized`` says the database has data (its status, or its volumes' identity), so a
    missing Lease is lost, not new; ``identity`` its system identifier when recorded.
    ``switchover_to`` asks for that server as the primary once it is Ready (``switchover_reason`` says who asks);
    ``requested`` is a user's request for a switchover to that server of ``database``, refused unless it is Ready and
    streaming; ``hold`` keeps an unready primary that is being restarted on purpose.
    ``states`` are what state.sh said of the servers (name → sampledb_state dict, or {'error': why}); None when not
    read in this run: the plan's ``read_states`` then names the servers to read, and the role plans again with them.
    ``quorum`` (sync mode: the synchronous standbys a commit waits for, 0 in async mode) and ``max_lag`` (async mode:
    bytes, None in sync mode) decide who may be promoted. ``fenced`` names a pod whose fence's mark was read
    (fenced.sh), ``fenced_lsn`` where its server stopped. ``replicas``: how many servers the database has.
    ``term_margin_seconds`` is added to a fenced primary's term before it counts as stopped (clocks, scheduling).
    (``unready_since`` and ``positions`` are the older callers' and unused: the Lease and ``states`` have them.)

    Returns a dict:
      target       the pod to label primary after this run ('' while a change is in progress)
      current      the primary before this run ('' when none), or the one being fenced
      fencing      the pod being fenced ('' when none)
      promote      the pod to promote once it is fenced
      annotations  the Lease's annotations to write (PLANNED_KEYS; '' removes one)
      holder       the Lease's holderIdentity to write
      changed      a new primary was promoted in this run
      began        a change of primary began in this run
      reason       failover | switchover | upgrade | rollout | recovery, for a change in progress or just made
      evict        the old primary's pod to delete (it did not stop within the fence timeout)
      message      what is happening, for status and Events
      refused      why ``requested`` cannot be done ('' when it can, or when nothing was requested)
      positions    the WAL positions a promotion in this run was chosen on ('' when none)
      blocked      why a change that is due cannot go on: the data it needs is missing ('' if not)
      read_states  the servers whose state.sh this run must read before planning again ([] when none)
      demote       every server to label replica in this run
      bootstrap    the server told to initialise a new database ('' when none)
      adopted      the Lease was rebuilt from the one server labelled and serving as the primary
      term_over    the promotion in this run was proven safe by the old primary's term alone
      term_end     while fencing, when the old primary's term is certainly over ('' when unknown or not written yet)
    """
    del unready_since, positions
    pods = sorted(pods or [], key=lambda p: _ordinal(p["metadata"]["name"]))
    names = [p["metadata"]["name"] for p in pods]
    by_name = {p["metadata"]["name"]: p for p in pods}
    serving = set(ready or [])
    ready = [n for n in names if n in serving]  # in ordinal order
    annotations = dict(((lease or {}).get("metadata") or {}).get("annotations") or {})
    lease_uid = annotations.get(DATABASE_UID, "")
    foreign = bool(uid) and bool(lease_uid) and lease_uid != uid
    if foreign:
        lease, annotations = {}, {}
    holder = ((lease or {}).get("spec") or {}).get("holderIdentity") or ""
    fencing = annotations.get(FENCING, "")
    reason_now = annotations.get(REASON, "")
    states = None if states is None else {k: v for k, v in states.items() if isinstance(v, dict)}
    replicas = len(names) if replicas in (None, "") else int(replicas)

    if holder in serving or hold or not holder or fencing:
        unready = ""
    else:
        unready = annotations.get(UNREADY_SINCE) or now
    keep = {DATABASE_UID: uid or lease_uid, UNREADY_SINCE: unready, PRIMARY_TERM: annotations.get(PRIMARY_TERM, "")}
    no_change = {**{k: "" for k in CHANGE_KEYS}, **keep}
    refused = ("" if not requested or requested in ready
               else f"{requested} is not a server of {database} (its servers: {', '.join(names)})"
               if requested not in names else f"{requested} is not Ready")
    plan = {"target": holder, "current": holder, "fencing": "", "annotations": no_change, "holder": holder,
            "changed": False, "began": False, "promote": "", "reason": "", "evict": "", "message": "",
            "refused": refused, "positions": "", "blocked": "", "read_states": [], "demote": [], "bootstrap": "",
            "adopted": False, "term_over": False, "term_end": ""}
    if foreign:
        plan["message"] = f"the Lease {database}-primary was an earlier database's; it is replaced"

    # every server the database has, also one whose pod is gone for now (its volume may hold acknowledged writes)
    members = sorted(set(names) | ({f"{database}-{i}" for i in range(replicas)} if database else set()), key=_ordinal)

    def others_than(target: str) -> list[str]:
        return [n for n in names if n != target]

    def read(servers) -> dict:
        """The plan so far, asking for these servers' states first."""
        return {**plan, "read_states": [n for n in servers if n in by_name]}

    def known(chosen_from: dict) -> str:
        return ("WAL positions: " + ", ".join(f"{n} {s.get('lsn') or '?'} (timeline {s.get('timeline') or '?'})"
                                              for n, s in sorted(chosen_from.items(), key=lambda kv: _ordinal(kv[0]))))

    def with_data(among) -> dict:
        """The states of these servers that hold this database's data."""
        found = {n: s for n in among if (s := (states or {}).get(n)) and s.get("data") == "yes" and "error" not in s}
        if identity:
            found = {n: s for n, s in found.items() if s.get("sysid") in ("", identity)}
        return found

    def sole_standby(excluded: str) -> bool:
        """Sync mode with one other server: every acknowledged commit waited for it, so it has them all and there is
        nobody to compare it with (no state to read)."""
        return bool(quorum) and len([n for n in members if n != excluded]) == 1

    def choose(excluded: str, wanted: str = "") -> tuple[str, str]:
        """(the server to promote, why none can be) once ``excluded`` has stopped; ('', '') until ``states`` are
        read."""
        others = [n for n in members if n != excluded]
        if sole_standby(excluded):
            only = others[0]
            return (only, "") if only in ready else ("", f"{only}, the only other server, is not Ready")
        if states is None or any(n in by_name and n not in states for n in others):
            # (a switchover's check read only the primary and its target: the others are read now, once it stopped)
            return "", ""
        holding = with_data(others)
        missing = [n for n in others if n not in states or "error" in states[n]]
        if quorum and missing:
            why = "; ".join(f"{n}: {states.get(n, {}).get('error', 'its pod does not exist')}" for n in missing)
            return "", (f"the WAL position of {', '.join(missing)} could not be read ({why}); in sync mode a server is "
                        "promoted only when every other server's position is known, so that the one promoted has every "
                        "acknowledged write: bring it back (its volume may hold the only copy of the last "
                        "acknowledged writes)")
        if not holding:
            return "", "no other server holds the database's data, as far as their state shows"
        best = max(holding, key=lambda n: (_progress(holding[n]), -_ordinal(n)))
        if wanted and wanted in holding and wanted in ready:
            stopped = sampledb_lsn(fenced_lsn)
            behind = stopped is not None and (sampledb_lsn(holding[wanted].get("lsn")) or -1) <= stopped
            if not behind and _progress(holding[wanted]) >= _progress(holding[best]):
                best = wanted
        if best not in ready:
            return "", f"the most advanced server, {best}, is not Ready"
        return best, ""

    def term_ends(old: str, pod_uid: str, written: str) -> datetime | None:
        """When the fenced primary's term has certainly run out (None when its pod enforces none we know of, or the
        fence is not written yet): a read of the Lease naming it was sent before the fence's write, so its server
        stops taking writes a term after that write, and is ended a stop time later if it has not stopped."""
        record = (annotations.get(PRIMARY_TERM) or "").split()
        if (replicas <= 1 or len(record) != 3 or record[0] != pod_uid or not all(f.isdigit() for f in record[1:])
                or _time(written) is None):
            return None
        # (times here are to the second, cut short: the write came before the second after the one written)
        return _time(written) + timedelta(seconds=1 + int(record[1]) + int(record[2]) + int(term_margin_seconds))

    def fence(old: str, new: str, reason: str, since: str, pod_uid: str, stopped: bool = False) -> dict:
        # (this run read the fence from the Lease: it was written before now)
        written = (annotations.get(FENCING_WRITTEN) or now) if fencing == old else ""
        term_end = term_ends(old, pod_uid, written)
        waited = (_time(now) - _time(since)).total_seconds() if _time(since) else 0
        # (the term needs no word from the old primary's kubelet, which may be dead or cut off: its own server pod
        # stops it, by a watchdog of its own, once no read of the Lease names it)
        term_over = term_end is not None and _time(now) >= term_end
        by_kubelet = stopped or (old not in by_name) or sampledb_fenced(pods, old, pod_uid)
        by_term = term_over and not by_kubelet
        how = (f"cannot take writes any more (the Lease has named nobody since {written[11:19]}, and its term is over)"
               if by_term else "has stopped")
        fenced_plan = {**plan, "target": "", "current": old, "holder": "", "fencing": old, "promote": new,
                       "reason": reason, "demote": names,
                       "term_end": f"{term_end:{TIME_FORMAT}}" if term_end else "",
                       "annotations": {**keep, UNREADY_SINCE: "", FENCING: old, FENCING_UID: pod_uid,
                                       FENCING_SINCE: since, FENCING_WRITTEN: written, PROMOTE: new, REASON: reason}}
        if by_kubelet or by_term:
            chosen, why = choose(old, new)
            if chosen:
                used = known(with_data(others_than(old))) if states else ""
                return {**plan, "target": chosen, "current": old, "holder": chosen, "changed": True, "reason": reason,
                        "positions": used, "demote": others_than(chosen), "term_over": by_term,
                        "annotations": {**no_change, UNREADY_SINCE: ""},
                        "message": f"{old} {how}; promoted {chosen}" + (f" ({used})" if used else "")}
            if not why:
                return {**fenced_plan, "read_states": others_than(old),
                        "message": f"{old} {how}; reading the other servers' WAL positions"}
            return {**fenced_plan, "blocked": why, "message": f"{old} {how}; nobody is promoted: {why}"}
        down = sampledb_container_stopped(pods, old)
        evict = old if old in by_name and (down or waited >= fence_timeout_seconds) else ""
        message = (f"waiting for {old} to stop taking writes before promoting {new or 'a replica'}"
                   + (f" (by {term_end:%H:%M:%S} its term is over: that is proof enough, whatever its node says)"
                      if term_end else "")
                   + ("; its server is not running, so its pod is deleted (restarted, it could start with its "
                      "old label)" if down and evict
                      else f"; it did not stop within {fence_timeout_seconds}s, so its pod is deleted" if evict
                      else ""))
        return {**fenced_plan, "evict": evict, "message": message}

    if fencing:
        # A change in progress: promote once the old primary has stopped.
        return fence(fencing, annotations.get(PROMOTE, ""), reason_now or "failover",
                     annotations.get(FENCING_SINCE, now), annotations.get(FENCING_UID, ""),
                     stopped=bool(fenced) and fenced == fencing)

    if reason_now == RECOVERY and not holder:
        return recover(plan, names, by_name, now, annotations, keep, states, identity, first=False)

    if not holder:
        primaries = [n for n in names if _labelled(by_name[n]) == "primary"]
        if not initialized and not primaries:
            # A new database: the lowest ordinal initialises it, recorded before its pod exists (a Lease written only
            # once pods are seen would be missing, not new, if the database were initialised in between).
            first = names[0] if names else f"{database}-0" if database else ""
            return {**plan, "target": first, "holder": first, "current": "", "bootstrap": first,
                    "demote": others_than(first)}
        if len(primaries) == 1 and primaries[0] in serving:
            # The Lease was lost while the primary served: record it again, change nothing.
            return {**plan, "target": primaries[0], "holder": primaries[0], "current": primaries[0], "adopted": True,
                    "demote": others_than(primaries[0]),
                    "message": f"the Lease was missing; {primaries[0]}, the one server serving as the primary, is "
                               "recorded again"}
        return recover(plan, names, by_name, now, annotations, keep, states, identity, first=True)

    def begin(new: str, reason: str) -> dict:
        meta = (by_name.get(holder) or {}).get("metadata") or {}
        # A new pod of the primary's name (the old one was deleted) that was never labelled: its entrypoint
        # waits for a label before it starts a server, so there is nothing to stop.
        never_labelled = bool(meta) and ROLE_LABEL not in (meta.get("labels") or {})
        return {**fence(holder, new, reason, now, meta.get("uid", ""), stopped=never_labelled), "began": True}

    wanted = switchover_to or (requested if requested and not refused else "")
    wanted_reason = switchover_reason if switchover_to else "switchover"
    if wanted and wanted != holder and wanted in ready and holder in serving and not sole_standby(holder):
        # A switchover takes a server that streams from the primary and is close behind it: checked before the
        # primary is stopped (after, the promoted one must also have received where the old one stopped).
        if states is None:
            return read([holder, wanted])
        target_state, primary_state = states.get(wanted) or {}, states.get(holder) or {}
        lag = ((sampledb_lsn(primary_state.get("lsn")) or 0) - (sampledb_lsn(target_state.get("lsn")) or 0)
               if primary_state.get("lsn") and target_state.get("lsn") else None)
        why = ("its state could not be read" if not target_state or "error" in target_state
               else "it is not streaming from the primary" if target_state.get("streaming") != "yes"
               else f"it is {lag} bytes behind the primary (at most {switchover_max_lag})"
               if lag is not None and lag > int(switchover_max_lag) else "")
        if why:
            message = f"a switchover to {wanted} waits: {why}"
            if wanted == requested:
                return {**plan, "refused": f"{wanted}: {why}", "message": message}
            return {**plan, "blocked": message, "message": message}
        return begin(wanted, wanted_reason)
    if wanted and wanted != holder and wanted in ready and (holder not in by_name or sole_standby(holder)):
        return begin(wanted, wanted_reason)
    if not initialized:
        # Told to initialise until the database is (its server may start long after the Lease named it); no data
        # was acknowledged yet, so there is nothing to fail over to.
        return {**plan, "bootstrap": holder}
    if holder in serving or hold:
        return plan
    gone_for_good = holder not in by_name and _ordinal(holder) >= replicas
    unready_for = (_time(now) - _time(unready)).total_seconds() if _time(unready) else 0
    if not gone_for_good and unready_for < float(grace_seconds):
        return plan
    candidates = [n for n in ready if n != holder]
    if not candidates:
        return {**plan, "message": f"primary {holder} is not Ready and no replica is Ready to take over"}
    if max_lag not in (None, ""):
        # async mode: begin only if a replica is within the bound of the primary's last recorded position
        if states is None:
            return read(candidates)
        reference = sampledb_lsn(annotations.get(PRIMARY_LSN))
        holding = with_data(candidates)
        best = max(holding, key=lambda n: (_progress(holding[n]), -_ordinal(n))) if holding else ""
        behind = (reference - (sampledb_lsn(holding[best].get("lsn")) or 0)) if best and reference is not None else None
        if behind is None or behind > int(max_lag):
            blocked = (f"primary {holder} is not Ready, and no replica is promoted: "
                       + (f"the most advanced, {best}, is {behind} bytes behind its last recorded position "
                          f"{annotations[PRIMARY_LSN]}" if behind is not None
                          else "the primary's position was never recorded" if reference is None
                          else "no replica's WAL position could be read, so none is known to be within it")
                       + f" (spec.replication.maximumLagOnFailover: {int(max_lag)} bytes"
                       + (f"; {known(holding)}" if holding else "") + f"); {holder} stays the primary")
            return {**plan, "message": blocked, "blocked": blocked}
        return begin(best, "failover")
    return begin(candidates[0], "failover")


def sampledb_leader_plan(pods, lease, now, ready, *args, **kwargs) -> dict:
    """What the leader role does in this run (_leader_plan), with the primary's term recorded as it should be after
    it (_term_record)."""
    plan = _leader_plan(pods, lease, now, ready, *args, **kwargs)
    replicas = kwargs.get("replicas")
    replicas = len(pods or []) if replicas in (None, "") else int(replicas)
    by_name = {p["metadata"]["name"]: p for p in pods or []}
    annotations = plan["annotations"]
    return {**plan, "annotations": {**annotations, PRIMARY_TERM: _term_record(
        plan, by_name, annotations.get(PRIMARY_TERM) or "", replicas)}}


def recover(plan, names, by_name, now, annotations, keep, states, identity, first) -> dict:
    """The Lease of an initialised database is lost (deleted, or the database re-created on its retained volumes):
    every server is fenced (labelled replica), then the one whose WAL goes furthest is promoted, once no server
    takes writes any more. Never the lowest ordinal by default, never an empty server."""
    since = (not first and annotations.get(FENCING_SINCE)) or now
    recovering = {**plan, "target": "", "holder": "", "current": "", "reason": RECOVERY, "demote": names,
                  "annotations": {**keep, UNREADY_SINCE: "", FENCING: "", FENCING_UID: "", FENCING_SINCE: since,
                                  PROMOTE: "", REASON: RECOVERY},
                  "began": first}
    if states is None:
        return {**recovering, "read_states": names,
                "message": "the Lease is missing: every server is fenced until the one with the most WAL is known"}
    writing = [n for n in names if (s := states.get(n)) and s.get("running") == "yes" and s.get("recovery") == "no"]
    missing = [n for n in names if n not in states or "error" in states[n]]
    if missing:
        why = "; ".join(f"{n}: {states.get(n, {}).get('error', 'not read')}" for n in missing)
        blocked = (f"the Lease is missing and the state of {', '.join(missing)} could not be read ({why}): nobody is "
                   "promoted until every server's WAL position is known")
        return {**recovering, "blocked": blocked, "message": blocked}
    if writing:
        return {**recovering, "message": f"the Lease is missing: waiting for {', '.join(writing)} to stop "
                                         "taking writes before the server with the most WAL is promoted"}
    holding = {n: s for n, s in states.items() if n in by_name and s.get("data") == "yes"
               and (not identity or s.get("sysid") in ("", identity))}
    if not holding:
        blocked = ("the Lease is missing and no server holds this database's data"
                   + (f" (system identifier {identity})" if identity else "")
                   + ": nobody is promoted; restore the database from a backup")
        return {**recovering, "blocked": blocked, "message": blocked}
    best = max(holding, key=lambda n: (_progress(holding[n]), -_ordinal(n)))
    used = "WAL positions: " + ", ".join(f"{n} {s.get('lsn') or '?'} (timeline {s.get('timeline') or '?'})"
                                         for n, s in sorted(holding.items(), key=lambda kv: _ordinal(kv[0])))
    return {**plan, "target": best, "holder": best, "current": "", "changed": True, "reason": RECOVERY,
            "positions": used, "demote": [n for n in names if n != best],
            "annotations": {**keep, UNREADY_SINCE: "", **{k: "" for k in CHANGE_KEYS}},
            "message": f"the Lease was missing; promoted {best}, the server with the most WAL ({used})"}


def sampledb_lsn_to_record(lease, result, max_lag) -> dict[str, str]:
    """The Lease annotation to write with the primary's position (``result``: a state.sh line of the primary, or the
    k8s_exec result that printed one), or {} to leave it: it is written once the position has moved a quarter of
    ``max_lag`` past the recorded one, or gone back (a new database history: a major upgrade's load), so a busy
    database's resyncs do not write the Lease every time."""
    if max_lag in (None, ""):
        return {}
    if isinstance(result, dict):
        if not _exec_ok(result):
            return {}
        result = result.get("stdout") or ""
    state = sampledb_state(result)
    current = state.get("lsn", "") if state else str(result or "").strip()
    if state and (state.get("running") != "yes" or state.get("recovery") != "no"):
        return {}
    recorded = (((lease or {}).get("metadata") or {}).get("annotations") or {}).get(PRIMARY_LSN)
    old, new = sampledb_lsn(recorded), sampledb_lsn(current)
    if new is None:
        return {}
    if old is None or new < old or new - old >= max(int(max_lag) // 4, 1):
        return {PRIMARY_LSN: current.strip()}
    return {}


def sampledb_server_metadata(pods, plan: dict, instructions: dict) -> list[dict]:
    """The label and annotations each server pod should carry after this run, for those whose metadata differs:
    [{name, labels, annotations}] (a value None removes an annotation). ``instructions`` are the annotations every
    server gets (INSTRUCTIONS without the prefix: servers, synchronous-standby-names, upgrade-from, ...; '' or None
    for none); the primary alone gets ``fence``; the plan's ``bootstrap`` server alone gets bootstrap (its value: initdb
    unless the instructions say recovery). Demotions come
    first, the promotion last (the role applies them in this order)."""
    target = plan.get("target") or ""
    out = []
    for pod in sorted(pods or [], key=lambda p: (p["metadata"]["name"] == target, _ordinal(p["metadata"]["name"]))):
        meta = pod["metadata"]
        name = meta["name"]
        role = "primary" if name == target else "replica" if name in (plan.get("demote") or []) or target else ""
        have = meta.get("annotations") or {}
        want = {}
        for key in INSTRUCTIONS:
            value = instructions.get(key) or ""
            if key == "fence" and name != target:
                value = ""
            if key == "bootstrap":
                value = (instructions.get(key) or "initdb") if name == (plan.get("bootstrap") or "") else ""
            want[INSTRUCTION_PREFIX + key] = value or None
        changes = {k: v for k, v in want.items() if have.get(k) != v and not (v is None and k not in have)}
        labels = {ROLE_LABEL: role} if role and _labelled(pod) != role else {}
        if changes or labels:
            out.append({"name": name, "labels": labels, "annotations": changes})
    return out


def sampledb_plan_settled(plan: dict, pods, lease, requested: str = "", max_lag=None, labels=None,
                          metadata=None) -> bool:
    """True when the plan changes nothing: it keeps the primary the Lease names, no change of primary is in
    progress, asked for, refused or blocked, the Lease records exactly the plan's annotations and carries
    ``labels``, and every server is labelled and annotated as it should be (``metadata``: sampledb_server_metadata's
    answer, [] when nothing differs). Async mode (``max_lag``) is never settled: each run may record the primary's
    WAL position. Most runs are settled, and skip the steps of a change."""
    target = plan.get("target") or ""
    if max_lag not in (None, "") or requested or not target or plan.get("holder") != target:
        return False
    if any(plan.get(k) for k in ("fencing", "promote", "evict", "changed", "began", "refused", "blocked",
                                 "read_states", "adopted")):
        return False
    meta = (lease or {}).get("metadata") or {}
    if ((lease or {}).get("spec") or {}).get("holderIdentity") != target:
        return False
    recorded = meta.get("annotations") or {}
    if any((recorded.get(k) or "") != (v or "") for k, v in (plan.get("annotations") or {}).items()):
        return False
    if any((meta.get("labels") or {}).get(k) != v for k, v in (labels or {}).items()):
        return False
    if metadata:
        return False
    return all(_labelled(p) == ("primary" if p["metadata"]["name"] == target else "replica") for p in pods or [])


def _exec_ok(result: dict) -> bool:
    # (with failed_when: false a module error is not "failed": it has no stdout, only msg)
    return (not result.get("skipped") and not result.get("failed") and "stdout" in result
            and result.get("rc", result.get("return_code", 0)) == 0)


def sampledb_exec_output(results) -> dict[str, str]:
    """{item: stdout} of a k8s_exec loop's results that ran and succeeded (others are left out)."""
    return {r["item"]: (r.get("stdout") or "").strip() for r in results or [] if _exec_ok(r)}


def sampledb_exec_errors(results) -> list[str]:
    """'item: why' for each k8s_exec of the loop that ran and did not succeed."""
    return [f"{r['item']}: {_exec_error(r)}" for r in results or [] if not r.get("skipped") and not _exec_ok(r)]


def _exec_error(result: dict) -> str:
    return (result.get("msg") or result.get("stderr") or "exit status " + str(result.get("rc"))).strip()


def sampledb_exec_states(results) -> dict[str, dict]:
    """{pod: state} from a k8s_exec loop of state.sh: each server's state (sampledb_state), or {'error': why} for a
    server that could not be read (exec refused, the container not running)."""
    out = {}
    for r in results or []:
        if r.get("skipped"):
            continue
        out[r["item"]] = sampledb_state(r.get("stdout")) if _exec_ok(r) else {"error": _exec_error(r)}
    return out


def sampledb_identity_due(recorded: dict, now: str, retry_minutes=10) -> bool:
    """Whether to read the database's identity from the primary now: it is not recorded, and no attempt failed in
    the last ``retry_minutes`` (status.identity.checkedAt; where exec is refused every run would pay for one)."""
    if (recorded or {}).get("systemIdentifier"):
        return False
    checked = _time((recorded or {}).get("checkedAt"))
    return checked is None or (_time(now) - checked).total_seconds() >= float(retry_minutes) * 60


def sampledb_identity_record(result: dict, primary: str, known: str, now: str) -> dict:
    """status.identity from state.sh run on the primary (``result``, a k8s_exec result; skipped when ``known``):
    {systemIdentifier, timeline, primary, checkedAt}, or {error, checkedAt} when it could not be read."""
    if known:
        return {"systemIdentifier": known}
    if isinstance(result, dict) and _exec_ok(result):
        state = sampledb_state(result.get("stdout"))
        if state.get("sysid"):
            return {"systemIdentifier": state["sysid"], "timeline": state.get("timeline", ""), "primary": primary,
                    "checkedAt": now}
    return {"error": _exec_error(result) if isinstance(result, dict) else "not read", "checkedAt": now}


def sampledb_fence_written(plan: dict, now: str) -> dict[str, str]:
    """The Lease annotation to add once a fence the plan wrote is in the Lease: FENCING_WRITTEN, ``now`` (taken after
    the write), when the fence has none yet; {} otherwise."""
    if not plan.get("fencing") or (plan.get("annotations") or {}).get(FENCING_WRITTEN):
        return {}
    return {FENCING_WRITTEN: now}


def sampledb_leader_events(first: dict, plan: dict, grace_seconds=10, switchover_annotation="") -> list[dict]:
    """The Events of a run's change of primary: its first step (``first``) began a change or evicted a pod; its last
    (``plan``) promoted, is blocked, refused a switchover, or recorded a lost Lease again. [{reason, type, message}]"""
    def switching(p: dict) -> bool:
        return p.get("reason") in ("switchover", "upgrade", "rollout")
    upgrade = {"upgrade": " for the upgrade", "rollout": " to update the servers"}.get(plan.get("reason"), "")
    events = []
    if first.get("began") and not plan.get("changed"):
        if first.get("reason") == RECOVERY:
            events.append(("Recovering", "Warning", first.get("message", "")))
        elif switching(first):
            events.append(("SwitchingOver", "Normal", f"switching the primary from {first.get('current')} to "
                           f"{first.get('promote')}{upgrade}: it is stopped before another server is promoted"))
        else:
            events.append(("FailingOver", "Warning", f"primary {first.get('current')} was not Ready for "
                           f"{grace_seconds}s or more: it is stopped before another server is promoted"))
    # (the run's first step, or its last when the wait for the old primary showed that its pod must go)
    evicting = first if first.get("evict") else plan if plan.get("evict") else None
    if evicting:
        events.append(("EvictingPrimary", "Warning", evicting.get("message", "")))
    if plan.get("changed"):
        if plan.get("reason") == RECOVERY:
            events.append(("Recovered", "Warning", plan.get("message", "")))
        elif switching(plan):
            events.append(("SwitchedOver", "Normal",
                           f"switched the primary from {plan.get('current')} to {plan.get('target')}{upgrade}"))
        else:
            stopped = "its term ran out (it can take no writes)" if plan.get("term_over") else "was stopped"
            events.append(("FailedOver", "Warning", f"primary {plan.get('current')} failed and {stopped}; promoted "
                           f"{plan.get('target')}" + (f" ({plan['positions']})" if plan.get("positions") else "")))
    if plan.get("adopted"):
        events.append(("PrimaryRecorded", "Normal", plan.get("message", "")))
    if plan.get("blocked"):
        events.append(("SwitchoverWaiting" if switching(plan) else "FailoverBlocked", "Warning", plan["blocked"]))
    if plan.get("refused"):
        events.append(("SwitchoverRefused", "Warning", f"{switchover_annotation}: {plan['refused']}; the primary "
                       f"stays {plan.get('target') or plan.get('current')}"))
    return [{"reason": r, "type": k, "message": m} for r, k, m in events]


class FilterModule:
    def filters(self):
        return {"sampledb_leader_plan": sampledb_leader_plan, "sampledb_fenced": sampledb_fenced,
                "sampledb_plan_fenced": sampledb_plan_fenced, "sampledb_plan_settled": sampledb_plan_settled,
                "sampledb_lsn": sampledb_lsn, "sampledb_lsn_to_record": sampledb_lsn_to_record,
                "sampledb_exec_output": sampledb_exec_output, "sampledb_exec_errors": sampledb_exec_errors,
                "sampledb_exec_states": sampledb_exec_states, "sampledb_state": sampledb_state,
                "sampledb_server_metadata": sampledb_server_metadata,
                "sampledb_identity_due": sampledb_identity_due,
                "sampledb_identity_record": sampledb_identity_record,
                "sampledb_leader_events": sampledb_leader_events, "sampledb_fence_written": sampledb_fence_written,
                "sampledb_fence_wait": sampledb_fence_wait}
