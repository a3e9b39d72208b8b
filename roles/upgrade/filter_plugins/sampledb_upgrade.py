"""The next step of a minor upgrade (same data files, new binaries), as a StatefulSet's partitioned rolling
update: the replicas first, highest ordinal down; then a switchover to an upgraded replica; then the old
primary, which comes back as a replica. The primary is never restarted in place while a replica could take
over, so the write downtime is a switchover's."""

from __future__ import annotations


def sampledb_minor_step(front, partition_now, started, replicas, primary, name):
    """``front``: the lowest ordinal from which every server runs the new version and is Ready
    (sampledb_rollout_front); ``partition_now``: the StatefulSet's partition; ``started``: its template already
    has the new image; ``primary``: the current primary's pod name; ``name``: the SampleDB's.

    Returns {partition, switchover_to, hold, completed, updating}: the partition to set, the server the leader
    role should make primary ('' for none), whether the primary is being restarted on purpose (one server: no
    replica to switch to), the upgrade is complete, and the ordinal being updated (-1 when none)."""
    front, partition_now, replicas = int(front), int(partition_now), int(replicas)
    first = f"{name}-0"
    step = {"partition": 0, "switchover_to": "", "hold": False, "completed": front == 0, "updating": -1}
    if front == 0:
        return step
    # Lower the partition one server at a time; never raise it again (a server already updated stays so).
    partition = max(front - 1, 0) if not started else min(partition_now, max(front - 1, 0))
    step["partition"], step["updating"] = partition, partition
    if partition == 0 and replicas > 1 and primary == first:
        # Every replica is upgraded and Ready: the first one takes over before the old primary is touched.
        return {**step, "partition": 1, "switchover_to": f"{name}-1", "updating": -1}
    step["hold"] = partition == 0 and primary == first
    return step


class FilterModule:
    def filters(self):
        return {"sampledb_minor_step": sampledb_minor_step}
