"""How a SampleDB's servers take a change of their pod template (configuration, scripts, resources, a minor version),
a smaller replica count, or a drain of the primary's node, without the primary ever being taken from under its
clients: replicas first, one at a time; then a switchover to an updated replica that streams and is caught up (the
leader role checks both); then the old primary, now a replica. The StatefulSet's update strategy is OnDelete, so no
pod is replaced but by this plan."""

from __future__ import annotations

import json
import re

REVISION_LABEL = "controller-revision-hash"
STANDBY_SETTINGS = "sampledb.example.com/standby-settings"


def _lowered(pod: dict, sts: dict) -> list[str]:
    """The settings a standby must have at least as high as its primary that the new template lowers, compared with
    what ``pod`` runs (both carry them in an annotation); [] when unknown."""
    def settings(annotations: dict) -> dict:
        try:
            return json.loads((annotations or {}).get(STANDBY_SETTINGS) or "{}")
        except ValueError:
            return {}
    now = settings((pod.get("metadata") or {}).get("annotations"))
    new = settings(((((sts or {}).get("spec") or {}).get("template") or {}).get("metadata") or {}).get("annotations"))
    out = []
    for name, value in new.items():
        try:
            if name in now and int(value) < int(now[name]):
                out.append(name)
        except ValueError:
            continue
    return sorted(out)


def _ordinal(name: str) -> int:
    match = re.search(r"-(\d+)$", name)
    return int(match.group(1)) if match else -1


def sampledb_rollout_step(pods, sts, primary, ready, replicas, cordoned=None):
    """``pods``: the database's server pods; ``sts``: its StatefulSet as read ({} when there is none); ``primary``: the
    server the Lease names ('' when none); ``ready``: the servers that serve; ``replicas``: how many servers the
    database should have (spec.replicas, or one during a major upgrade); ``cordoned``: the nodes that take no new pods
    (a drain).

    Returns {replicas, switchover_to, delete, hold, outdated, completed, message}: the StatefulSet's replica count for
    this run (the current one while a switchover must first move the primary below the new count), the server to make
    primary ('' for none), the pod to delete now so that it comes back on the new template ('' for none), whether that
    is the primary itself (a single server: restarted in place, not failed over), the servers still on the old
    template, whether the rollout is complete, and what it waits for."""
    pods = sorted(pods or [], key=lambda p: _ordinal(p["metadata"]["name"]))
    replicas = int(replicas)
    serving = set(ready or [])
    current = int(((sts or {}).get("spec") or {}).get("replicas") or len(pods) or replicas)
    step = {"replicas": replicas, "switchover_to": "", "delete": "", "hold": False, "outdated": [], "completed": True,
            "message": ""}

    def best(candidates: list[str]) -> str:
        return next(iter(candidates), "")

    # Fewer servers: the StatefulSet removes the highest ordinals, so the primary moves below the new count first.
    if replicas < current and primary and _ordinal(primary) >= replicas:
        staying = [p["metadata"]["name"] for p in pods if _ordinal(p["metadata"]["name"]) < replicas
                   and p["metadata"]["name"] in serving]
        target = best(staying)
        return {**step, "replicas": current, "switchover_to": target, "completed": False,
                "message": (f"switching the primary over to {target} before the servers from {replicas} up go"
                            if target else f"waiting for a server below ordinal {replicas} to be Ready, to switch the "
                            f"primary over to it before the servers from {replicas} up go")}

    # The primary's node is being drained: another server takes over first, so the drain can evict it.
    by_name = {p["metadata"]["name"]: p for p in pods}
    node_of = {n: (p.get("spec") or {}).get("nodeName", "") for n, p in by_name.items()}
    if primary in by_name and node_of.get(primary) in set(cordoned or []):
        elsewhere = [n for n in by_name if n != primary and n in serving and node_of.get(n) not in set(cordoned or [])
                     and _ordinal(n) < replicas]
        if elsewhere:
            return {**step, "switchover_to": best(elsewhere), "completed": False,
                    "message": f"node {node_of[primary]} is cordoned: switching the primary over to {best(elsewhere)}"}

    status = (sts or {}).get("status") or {}
    revision = status.get("updateRevision", "")
    if not revision or int(status.get("observedGeneration") or 0) < int(((sts or {}).get("metadata") or {})
                                                                         .get("generation") or 0):
        return {**step, "completed": not sts, "message": "" if not sts else "waiting for the StatefulSet's new revision"}
    members = [p for p in pods if _ordinal(p["metadata"]["name"]) < replicas]
    outdated = [p["metadata"]["name"] for p in members
                if ((p["metadata"].get("labels") or {}).get(REVISION_LABEL)) != revision]
    step["outdated"] = outdated
    if not outdated:
        return step
    step["completed"] = False
    restarting = [p["metadata"]["name"] for p in members if p["metadata"]["name"] not in outdated
                  and (p["metadata"]["name"] not in serving or p["metadata"].get("deletionTimestamp"))]
    going = [n for n in outdated if by_name[n]["metadata"].get("deletionTimestamp")]
    if restarting or going:
        waiting = restarting or going
        # (a single server restarted on purpose: not a failure, nothing to fail over to)
        return {**step, "hold": len(members) == 1 and primary in waiting,
                "message": f"waiting for {', '.join(waiting)} to be back on the new template"}
    replicas_left = [n for n in outdated if n != primary]
    lowered = _lowered(by_name[primary], sts) if primary in outdated else []
    if lowered:
        # a standby with a lower value than its primary does not start: the primary takes it first, restarted in place
        return {**step, "delete": primary, "hold": True,
                "message": f"restarting {primary}, the primary, first: the new template lowers {', '.join(lowered)}, "
                           "which no standby may have lower than its primary"}
    if replicas_left:
        # one at a time; a server that does not serve on the old template first (the new one may be its fix)
        victim = sorted(replicas_left, key=lambda n: (n in serving, -_ordinal(n)))[0]
        return {**step, "delete": victim,
                "message": f"updating {victim} ({len(members) - len(outdated)} of {len(members)} done)"}
    # only the primary is left on the old template
    if len(members) == 1:
        return {**step, "delete": primary, "hold": True,
                "message": f"restarting {primary}, the only server, on the new template"}
    updated = [n for n in (p["metadata"]["name"] for p in members) if n != primary and n in serving]
    return {**step, "switchover_to": best(updated),
            "message": f"switching the primary over to {best(updated)} before {primary} is updated"}


class FilterModule:
    def filters(self):
        return {"sampledb_rollout_step": sampledb_rollout_step}
