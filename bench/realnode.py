"""`python -m bench.realnode`: figures of the real node (`cluster --name e2e up --real-node`), or with `--nodes N`
of N real nodes (`cluster --name nodes up --real-node --nodes N`): a warm `cluster up` after `down`, one PostgreSQL
server pod's start (created → Ready, image already imported), deploy/samples' SampleDB created → Ready with three real
servers, the CPU its server pods use while nothing happens, and the node components' memory (with several nodes, each
node's: its daemons, shims and pods, as its memory cgroup counts them, while a database ran on it).
Prints a table and writes it to bench/results/<date>-realnode.md; asserts nothing."""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import yaml

from bench.__main__ import write_table
from bench.harness import OURS_READY, median, ours
from localcluster import images
from localcluster.build import binary
from localcluster.cluster import NODE_ORDER, LocalCluster
from localcluster.netnode import NODE_COMPONENTS
from tests.kube import Kube, wait_for
from tests.operator import ROOT, install_sampledb_crds, sampledb_watches
from tests.realnode import simple_pod, wait_pod_ready
from tests.sampledb import GROUP, PLURAL, VERSION, get, sample


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


IDLE_SECONDS = 30


CGROUP_ROOTS = [""]  # the kubelets' cgroupRoot ("" for the one real node's "/")


def pod_cpu_seconds(uid: str) -> float:
    """The CPU time a pod's containers have used, from its cgroup (the kubelet's cgroupfs layout; v1 cpuacct or v2)."""
    for root in CGROUP_ROOTS:
        for qos in ("", "burstable/", "besteffort/"):
            v1 = Path(f"/sys/fs/cgroup/cpuacct{root}/kubepods/{qos}pod{uid}/cpuacct.usage")
            if v1.exists():
                return int(v1.read_text()) / 1e9
            v2 = Path(f"/sys/fs/cgroup{root}/kubepods/{qos}pod{uid}/cpu.stat")
            if v2.exists():
                return int(v2.read_text().split("usage_usec ", 1)[1].split()[0]) / 1e6
    raise FileNotFoundError(f"no cgroup found for pod {uid}")


def idle_cpu_percent(kube: Kube, ns: str, database: str) -> float:
    """One server pod's CPU (its containers: the server, its entrypoint, the Lease agent, the probes) while its
    database is Ready and nobody uses it, in % of a core (the mean of its servers over IDLE_SECONDS)."""
    uids = [p.metadata.uid for p in kube.core.list_namespaced_pod(ns, label_selector=(
        f"app.kubernetes.io/name=sampledb,app.kubernetes.io/instance={database},statefulset.kubernetes.io/pod-name")).items]
    def cpu() -> dict[str, float]:
        found = {}
        for uid in uids:
            try:
                found[uid] = pod_cpu_seconds(uid)
            except FileNotFoundError:  # (a pod replaced meanwhile)
                pass
        return found

    before, t0 = cpu(), time.monotonic()
    time.sleep(IDLE_SECONDS)
    after, took = cpu(), time.monotonic() - t0
    both = before.keys() & after.keys()
    return 100 * sum(after[u] - before[u] for u in both) / took / len(both) if both else float("nan")


def server_pod_start(kube: Kube, ns: str, i: int) -> float:
    pod = simple_pod(f"pg{i}", ["bash", "-c", "initdb -D /tmp/d --auth=trust >/dev/null && exec postgres -D /tmp/d -k /tmp"],
                     image=f"{images.POSTGRES_REPO}:{images.POSTGRES_VERSIONS[0]}",
                     securityContext={"runAsUser": 999, "runAsGroup": 999})
    pod["spec"]["containers"][0]["readinessProbe"] = {"exec": {"command": ["pg_isready", "-h", "127.0.0.1"]},
                                                      "periodSeconds": 1}
    t0 = time.monotonic()
    kube.core.create_namespaced_pod(ns, pod)
    wait_pod_ready(kube, ns, f"pg{i}")
    return time.monotonic() - t0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.realnode", description=__doc__)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--nodes", type=int, default=1, help="real nodes (the cluster 'nodes' when more than one)")
    args = parser.parse_args(argv)
    cluster = LocalCluster("nodes" if args.nodes > 1 else "e2e", real_node=True, nodes=args.nodes)
    CGROUP_ROOTS[:] = [n.cgroup_root for n in cluster.nodes] or [""]
    cluster.up(timeout=900)
    cluster.down()
    t0 = time.monotonic()
    cluster.up(timeout=900)
    warm_up = time.monotonic() - t0
    cluster.load_images(include_operator=False)
    kube = Kube(cluster.paths.kubeconfig, str(binary("kubectl")))
    install_sampledb_crds(kube)
    ns = f"bench-real-{int(time.time())}"
    kube.kubectl("create", "namespace", ns)
    starts = [server_pod_start(kube, ns, i) for i in range(args.runs)]
    watches = Path(tempfile.mkdtemp(prefix="bench-real-")) / "watches.yaml"
    watches.write_text(yaml.safe_dump(sampledb_watches()))
    op = ours(kube, ns, watches, "--ansible-roles-path", str(ROOT / "roles"))
    op.start(OURS_READY)
    ready, idle = [], []
    node_mb: dict[str, list[float]] = {}
    try:
        for i in range(args.runs):
            t0 = time.monotonic()
            kube.custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, sample(f"db{i}"))
            wait_for("Ready", lambda i=i: (get(kube, ns, f"db{i}").get("status") or {}).get("phase") == "Ready",
                     timeout=600, interval=0.2)
            ready.append(time.monotonic() - t0)
            print(f"  db{i}: create → Ready {ready[-1]:.1f} s", flush=True)
            time.sleep(10)  # (the runs that follow Ready: the operator then looks again each reconcilePeriod)
            idle.append(idle_cpu_percent(kube, ns, f"db{i}"))
            print(f"  db{i}: an idle server pod uses {idle[-1]:.2f}% of a core", flush=True)
            for n in cluster.nodes:
                node_mb.setdefault(n.name, []).append((n.memory_bytes() or 0) / 2**20)
            kube.custom.patch_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, f"db{i}",
                                                       {"spec": {"deletionPolicy": "Delete"}})
            kube.custom.delete_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, f"db{i}")
            wait_for("the database to go", lambda i=i: not [
                d for d in kube.custom.list_namespaced_custom_object(GROUP, VERSION, ns, PLURAL)["items"]
                if d["metadata"]["name"] == f"db{i}"], timeout=300)
        components = [f"{n.id}/{c}" for n in cluster.nodes for c in NODE_COMPONENTS] if cluster.nodes else NODE_ORDER
        memory = {c: rss_mb(pid) for c in components if (pid := cluster.pid(c))}
    finally:
        op.stop()
        kube.kubectl("delete", "namespace", ns, "--wait=false", check=False)
    shape = f"--real-node --nodes {args.nodes}" if cluster.nodes else "--real-node"
    rows = [[f"warm `cluster up {shape}` after `down`", f"{warm_up:.1f}", "", ""],
            ["PostgreSQL server pod created → Ready (initdb + start)", *(f"{f(starts):.1f}" for f in (median, min, max))],
            ["deploy/samples SampleDB (3 real servers) created → Ready",
             *(f"{f(ready):.1f}" for f in (median, min, max))],
            [f"an idle server pod's CPU over {IDLE_SECONDS} s [% of a core]", *(f"{f(idle):.2f}" for f in (median, min, max))]]
    rows += [[f"RSS of {c} [MB]", f"{mb:.0f}", "", ""] for c, mb in memory.items()]
    rows += [[f"memory of node {name} with a database on it [MB]", *(f"{f(mbs):.0f}" for f in (median, min, max))]
             for name, mbs in node_mb.items()]
    what = f"{args.nodes} real nodes" if cluster.nodes else "real node"
    write_table("realnode" if not cluster.nodes else f"realnode-{args.nodes}", [f"{what}, {args.runs} runs [s]",
                "median", "min", "max"], rows,
                role=f"the SampleDB operator (this repository's watches.yaml) on the local cluster's {what}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
