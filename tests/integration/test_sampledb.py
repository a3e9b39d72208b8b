"""The SampleDB operator (this repository's watches.yaml, playbook and roles) on the real cluster."""

from __future__ import annotations

import base64
import json
import re

import pytest

from tests.kube import Kube, wait_for
from tests.sampledb import GROUP, PLURAL, VERSION, condition, events, get, roles, sample, wait_phase


def test_sample_provisions_to_ready_with_exactly_one_primary(kube: Kube, namespace: str,
                                                             sampledb_operators) -> None:
    op = sampledb_operators(failover_grace_seconds=0)
    kube.custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, sample())
    db = wait_for("the SampleDB to be Ready", lambda: (
        d := get(kube, namespace, "inventory")).get("status", {}).get("phase") == "Ready"
        and d["status"].get("currentPrimary") and d, timeout=120)
    st = db["status"]
    assert st["version"] == sample()["spec"]["version"] and st["readyReplicas"] == 3 and st["readyReplicasText"] == "3/3"
    primary = st["currentPrimary"]
    server_roles = roles(kube, namespace, "inventory")
    assert sorted(server_roles.values()) == ["primary", "replica", "replica"]
    assert server_roles[primary] == "primary"
    lease = kube.kubectl("-n", namespace, "get", "lease", "inventory-primary", "-o", "json")
    assert json.loads(lease.stdout)["spec"]["holderIdentity"] == primary
    svc = kube.core.read_namespaced_service("inventory-primary", namespace)
    assert svc.spec.selector["sampledb.example.com/role"] == "primary"
    # what `kubectl get sdb` shows
    table = kube.kubectl("-n", namespace, "get", "sdb", "inventory").stdout
    assert "Ready" in table and st["version"] in table and "3/3" in table and primary in table

    # the credentials are generated once and never rewritten; a parameter edit rolls the servers
    secret = kube.core.read_namespaced_secret("inventory-credentials", namespace)
    secret_rv = secret.metadata.resource_version
    pods_before = {p.metadata.name: p.metadata.uid for p in kube.core.list_namespaced_pod(
        namespace, label_selector="app.kubernetes.io/instance=inventory,statefulset.kubernetes.io/pod-name").items}
    sts_before = kube.apps.read_namespaced_stateful_set("inventory", namespace)
    hash_before = sts_before.spec.template.metadata.annotations["sampledb.example.com/config-hash"]
    kube.custom.patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "inventory",
                                               {"spec": {"parameters": {"max_connections": "300"}}})
    wait_for("the new postgresql.conf", lambda: "max_connections = '300'" in kube.core.read_namespaced_config_map(
        "inventory-config", namespace).data["postgresql.conf"], timeout=60)
    wait_for("the servers to roll", lambda: kube.apps.read_namespaced_stateful_set("inventory", namespace)
             .spec.template.metadata.annotations["sampledb.example.com/config-hash"] != hash_before, timeout=60)
    assert kube.core.read_namespaced_secret("inventory-credentials", namespace).metadata.resource_version == secret_rv
    # max_connections is read at start only: the servers are replaced, the replicas first (the primary's turn needs a
    # switchover, which needs the replicas' WAL positions by exec: not on kwok)
    replicas = [n for n, r in roles(kube, namespace, "inventory").items() if r == "replica"]

    def replaced() -> bool:
        now = {p.metadata.name: p.metadata.uid for p in kube.core.list_namespaced_pod(
            namespace, label_selector="app.kubernetes.io/instance=inventory").items}
        return all(now.get(n) not in (None, pods_before[n]) for n in replicas)

    wait_for("the replicas to be replaced", replaced, timeout=240, interval=1)
    # no credential in the operator's log, in any form, nor in what users read (status, Events)
    seen = op.logs() + json.dumps(get(kube, namespace, "inventory")) + " ".join(
        e.message or "" for e in kube.core.list_namespaced_event(namespace).items)
    passwords = {k: v for k, v in secret.data.items() if "password" in k}
    assert len(passwords) >= 3, sorted(secret.data)
    for key, encoded in passwords.items():
        assert encoded not in seen and base64.b64decode(encoded).decode() not in seen, f"{key} leaked"


def test_failover_when_the_primary_goes(kube: Kube, namespace: str, sampledb_operators) -> None:
    """Two servers in sync mode: the one replica has every acknowledged commit (each waited for it), so it is
    promoted once the old primary has stopped, without reading its WAL position (kwok's pods cannot be exec'd)."""
    sampledb_operators(failover_grace_seconds=0)
    kube.custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, sample("ha", replicas=2))
    db = wait_for("Ready", lambda: (d := get(kube, namespace, "ha")).get("status", {}).get("phase") == "Ready"
                  and d["status"].get("currentPrimary") and d, timeout=120)
    old = db["status"]["currentPrimary"]
    # The primary's pod is being deleted (a drain, an eviction) and takes its time to go (kwok's deletion
    # stage is told to wait): it is no longer Ready, but its server may still be writing, so nobody is promoted
    # until it is gone (grace 0 here); then a Ready replica takes over.
    kube.core.patch_namespaced_pod(old, namespace, {"metadata": {"annotations": {
        "pod-delete.stage.kwok.x-k8s.io/delay": "75s"}}})  # (time enough to see the fence under load)
    kube.core.delete_namespaced_pod(old, namespace)
    fencing = wait_for("the failover to wait for the old primary", lambda: (
        st := get(kube, namespace, "ha")["status"]).get("phase") == "FailingOver" and st.get("targetPrimary") and st)
    assert not fencing.get("currentPrimary")
    assert [k for k, v in roles(kube, namespace, "ha").items() if v == "primary"] == []
    lease = kube.coordination.read_namespaced_lease("ha-primary", namespace)
    assert not lease.spec.holder_identity and lease.metadata.annotations["sampledb.example.com/fencing"] == old
    assert kube.core.read_namespaced_pod(old, namespace).metadata.deletion_timestamp  # it is still there
    new = wait_for("a new primary", lambda: (p := get(kube, namespace, "ha")["status"].get("currentPrimary"))
                   not in (None, old) and p, timeout=150)
    assert new == fencing["targetPrimary"]
    wait_for("exactly one pod labelled primary, the new one", lambda: [
        k for k, v in roles(kube, namespace, "ha").items() if v == "primary"] == [new], timeout=30)
    events = [e for e in kube.core.list_namespaced_event(namespace).items if e.reason == "FailedOver"]
    assert events and new in events[0].message


def test_a_step_that_fails_on_every_run_never_switches_failover_off(kube: Kube, namespace: str,
                                                                    sampledb_operators) -> None:
    """A bad edit makes provision fail on every run (requests above limits: the CRD cannot compare quantities):
    status says so, never Ready, and when the primary goes a replica is still promoted."""
    sampledb_operators(failover_grace_seconds=0)
    kube.custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, sample("bad", replicas=2))
    old = wait_phase(kube, namespace, "bad")["status"]["currentPrimary"]
    kube.custom.patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "bad", {"spec": {"resources": {
        "requests": {"memory": "2Gi"}, "limits": {"memory": "1Gi"}}}})
    degraded = wait_for("the failing step in status", lambda: (
        c := condition(get(kube, namespace, "bad"), "Degraded")).get("status") == "True"
        and "spec.resources.requests.memory 2Gi is more than spec.resources.limits.memory 1Gi" in c["message"]
        and c, timeout=120)
    assert degraded["reason"] == "ProvisionFailed"
    # its pod takes its time to go (kwok's deletion stage waits), so it is not simply back at once
    kube.core.patch_namespaced_pod(old, namespace, {"metadata": {"annotations": {
        "pod-delete.stage.kwok.x-k8s.io/delay": "40s"}}})
    kube.core.delete_namespaced_pod(old, namespace)
    new = wait_for("a new primary", lambda: (p := get(kube, namespace, "bad")["status"].get("currentPrimary"))
                   not in (None, old) and p, timeout=180)
    assert [k for k, v in roles(kube, namespace, "bad").items() if v == "primary"] == [new]
    assert [e for e in events(kube, namespace, "FailedOver") if new in e.message]
    db = get(kube, namespace, "bad")
    assert db["status"]["phase"] != "Ready" and condition(db, "Degraded")["status"] == "True"


def test_a_failover_that_cannot_read_the_replicas_positions_promotes_nobody(kube: Kube, namespace: str,
                                                                           sampledb_operators) -> None:
    """Three servers in sync mode (ANY 1): either replica may hold the last acknowledged commit, so their WAL
    positions decide, and where they cannot be read (kwok's pods cannot be exec'd, as when pods/exec is refused)
    nobody is promoted: FailoverBlocked and Degraded say why, instead of promoting the lowest ordinal."""
    sampledb_operators(failover_grace_seconds=0)
    kube.custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, sample("fc", replicas=3))
    old = wait_phase(kube, namespace, "fc", timeout=120)["status"]["currentPrimary"]
    kube.core.delete_namespaced_pod(old, namespace)
    blocked = wait_for("the blocked failover", lambda: events(kube, namespace, "FailoverBlocked"), timeout=180)
    assert "could not be read" in blocked[-1].message and "in sync mode" in blocked[-1].message
    degraded = wait_for("Degraded to say so", lambda: (c := condition(get(kube, namespace, "fc"), "Degraded")).get(
        "reason") == "FailoverBlocked" and c, timeout=30)
    assert degraded["status"] == "True" and "could not be read" in degraded["message"]
    st = get(kube, namespace, "fc")["status"]
    assert st["phase"] == "FailingOver" and not st.get("currentPrimary")
    assert "primary" not in roles(kube, namespace, "fc").values()
    assert not events(kube, namespace, "FailedOver")


SWITCHOVER = "sampledb.example.com/switchover-to"


def test_a_switchover_asked_for_by_annotation_stops_the_old_primary_before_promoting(
        kube: Kube, namespace: str, sampledb_operators) -> None:
    """kwok's servers do not follow their labels, so the old primary never stops by itself: once the fence
    timeout is over its pod is deleted, and only when it is gone is the named server promoted."""
    sampledb_operators(fence_timeout_seconds=3)
    kube.custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, sample("sw", replicas=2))
    old = wait_phase(kube, namespace, "sw", timeout=120)["status"]["currentPrimary"]
    old_uid = kube.core.read_namespaced_pod(old, namespace).metadata.uid
    wanted = next(p for p in sorted(roles(kube, namespace, "sw")) if p != old)
    kube.custom.patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "sw",
                                               {"metadata": {"annotations": {SWITCHOVER: wanted}}})
    switching = wait_for("the switchover to begin", lambda: (
        st := get(kube, namespace, "sw")["status"]).get("phase") == "SwitchingOver" and st, timeout=180)
    assert switching["targetPrimary"] == wanted and not switching.get("currentPrimary")
    assert "primary" not in roles(kube, namespace, "sw").values()
    wait_for("the named server to be primary", lambda: (
        st := get(kube, namespace, "sw")["status"]).get("currentPrimary") == wanted and st["phase"] == "Ready",
        timeout=120)
    assert [k for k, v in roles(kube, namespace, "sw").items() if v == "primary"] == [wanted]
    assert kube.core.read_namespaced_pod(old, namespace).metadata.uid != old_uid  # evicted, then recreated
    assert SWITCHOVER not in (get(kube, namespace, "sw")["metadata"].get("annotations") or {})
    switched = events(kube, namespace, "SwitchedOver")
    # promoted once, in the run that deleted the old primary's pod (which waited for it to go)
    assert [(wanted in e.message, e.count) for e in switched] == [(True, 1)], [(e.message, e.count) for e in switched]
    assert events(kube, namespace, "EvictingPrimary")
    lease = kube.coordination.read_namespaced_lease("sw-primary", namespace)
    uid = get(kube, namespace, "sw")["metadata"]["uid"]
    # the change is no longer recorded: whose Lease it is, and that the new primary, labelled so while there are
    # several servers, keeps to its term (so that a failover may promote on that term alone)
    promoted = kube.core.read_namespaced_pod(wanted, namespace).metadata.uid
    assert lease.spec.holder_identity == wanted and lease.metadata.annotations == {
        "sampledb.example.com/database-uid": uid, "sampledb.example.com/primary-term": f"{promoted} 15 10"}


def test_a_switchover_to_a_server_that_does_not_exist_is_refused(kube: Kube, namespace: str,
                                                                 sampledb_operators) -> None:
    sampledb_operators()
    kube.custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, sample("sw", replicas=2))
    primary = wait_phase(kube, namespace, "sw", timeout=120)["status"]["currentPrimary"]
    kube.custom.patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "sw",
                                               {"metadata": {"annotations": {SWITCHOVER: "sw-7"}}})
    refused = wait_for("the refusal", lambda: events(kube, namespace, "SwitchoverRefused"), timeout=60)
    assert "sw-7 is not a server of sw (its servers: sw-0, sw-1)" in refused[0].message
    wait_for("the request to be removed", lambda: SWITCHOVER not in (
        get(kube, namespace, "sw")["metadata"].get("annotations") or {}), timeout=30)
    assert get(kube, namespace, "sw")["status"]["currentPrimary"] == primary


@pytest.mark.parametrize(("spec", "message"), [
    ({"version": "15.8", "replicas": 12}, "spec.replicas: Invalid value: 12"),
    ({"version": "fifteen"}, "spec.version: Invalid value: \"fifteen\""),
    ({"version": "15.8", "deletionPolicy": "Maybe"}, 'spec.deletionPolicy: Unsupported value: "Maybe"'),
    ({"version": "15.8", "parameters": {"port": "5433"}}, "this setting is managed by the operator"),
    ({"version": "15.8", "parameters": {"archive_command": "curl evil"}}, "this setting is managed by the operator"),
    ({"version": "15.8", "parameters": {"recovery_target_time": "x"}}, "this setting is managed by the operator"),
    ({"version": "15.8", "parameters": {"work_mem": "4MB\ninclude '/etc/passwd'"}}, "cannot contain control characters"),
    ({"version": "15.8", "backup": {"schedule": "a b c d e"}}, "spec.backup.schedule"),
    ({"version": "15.8", "backup": {"schedule": "61 * * * *"}}, "spec.backup.schedule"),
    ({"version": "15.8", "resources": {"limits": {"gpu": "1"}}}, "only cpu, memory, ephemeral-storage"),
    ({"version": "15.8", "backup": {"archiveTimeout": "5s"}}, "backup.archiveTimeout must be from 10s to 60min"),
    ({"version": "15.8", "backup": {"archiveTimeout": "2h"}}, "spec.backup.archiveTimeout: Invalid value"),
    ({"version": "15.8", "backup": {"objectStore": {"bucket": "b"}}}, "spec.backup.objectStore.credentials: Required"),
    ({"version": "15.8", "backup": {"objectStore": {"bucket": "B_x", "credentials": {"secretName": "k"}}}},
     "spec.backup.objectStore.bucket: Invalid value"),
    ({"version": "15.8", "backup": {"objectStore": {"bucket": "bk", "path": "../x", "credentials": {"secretName": "k"}}}},
     "spec.backup.objectStore.path: Invalid value"),
    ({"version": "15.8", "backup": {"objectStore": {"bucket": "a..b", "credentials": {"secretName": "k"}}}},
     "not a bucket name"),
    ({"version": "15.8", "backup": {"objectStore": {"bucket": "bk", "path": "team/wals", "credentials": {"secretName": "k"}}}},
     "wals and base are barman-cloud's own directories"),
    ({"version": "15.8", "backup": {"objectStore": {"bucket": "bk", "compression": "xz", "credentials": {"secretName": "k"}}}},
     "spec.backup.objectStore.compression: Unsupported value"),
    ({"version": "15.8", "backup": {"objectStore": {"bucket": "bk", "endpointURL": "ftp://x",
                                                    "credentials": {"secretName": "k"}}}},
     "spec.backup.objectStore.endpointURL: Invalid value"),
])
def test_a_bad_sampledb_is_refused_naming_the_field(kube: Kube, namespace: str, sampledb_crds: None,
                                                    spec: dict, message: str) -> None:
    doc = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "SampleDB", "metadata": {"name": "bad"}, "spec": spec}
    proc = kube.kubectl("-n", namespace, "apply", "-f", "-", input=json.dumps(doc), check=False)
    assert proc.returncode != 0 and message in proc.stderr, proc.stderr


def test_a_name_too_long_for_the_names_made_from_it_is_refused(kube: Kube, namespace: str, sampledb_crds: None) -> None:
    """<name>-backup is a CronJob (52 characters at most), <name>-pre-NN-NN-<uid> a Job (63): a name of up to 40
    characters makes them all fit, and one with a dot would break every Service."""
    for name in ("x" * 41, "has.dot"):
        doc = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "SampleDB", "metadata": {"name": name},
               "spec": {"version": "15.8"}}
        proc = kube.kubectl("-n", namespace, "apply", "-f", "-", input=json.dumps(doc), check=False)
        assert proc.returncode != 0 and "metadata.name must be at most 40 characters" in proc.stderr, proc.stderr


def test_version_rules_on_update(kube: Kube, namespace: str, sampledb_crds: None) -> None:
    def apply(spec: dict) -> str:
        doc = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "SampleDB", "metadata": {"name": "v"}, "spec": spec}
        return kube.kubectl("-n", namespace, "apply", "-f", "-", input=json.dumps(doc), check=False).stderr

    assert apply({"version": "15.8"}) == ""
    assert "spec.version cannot go down" in apply({"version": "15.4"})
    # an upgrade that has not completed can be taken back to the version that serves (a typo, an image that does
    # not start): status.version says which
    kube.kubectl("-n", namespace, "patch", "sdb", "v", "--subresource=status", "--type=merge",
                 "-p", '{"status": {"version": "15.8"}}')
    assert apply({"version": "15.81"}) == ""
    assert apply({"version": "15.8"}) == ""
    assert "spec.version cannot go down" in apply({"version": "15.7"})
    assert "a major version upgrade needs spec.upgrade.allowMajor: true" in apply({"version": "16.1"})
    assert apply({"version": "16.1", "upgrade": {"allowMajor": True}}) == ""
    assert "restoreFrom is immutable" in apply({"version": "16.1", "upgrade": {"allowMajor": True},
                                                "restoreFrom": {"backup": "b"}})


def test_every_role_is_idempotent(kube: Kube, namespace: str, sampledb_operators) -> None:
    """Once Ready, a run with nothing changed (the periodic resync) changes nothing."""
    op = sampledb_operators()
    doc = sample("idem", replicas=2)
    doc["metadata"]["annotations"] = {"ansible.sdk.operatorframework.io/reconcile-period": "2s"}  # resync often
    kube.custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, doc)
    db = wait_phase(kube, namespace, "idem")
    assert condition(db, "Ready")["status"] == "True" and condition(db, "Progressing")["status"] == "False"
    assert condition(db, "Degraded")["status"] == "False"
    ended = r"run end: SampleDB \S+/idem (\w+) in \S+ \(ok=\d+ changed=(\d+)"
    # (the run after Ready may still settle something: the first run that changes nothing is the start)
    wait_for("a run that changes nothing", lambda: re.findall(ended, op.logs())[-1:] == [("succeeded", "0")],
             timeout=180, interval=0.5)
    runs = len(re.findall(ended, op.logs()))
    before = versions(kube, namespace, "idem")
    log = op.wait_for_log(r"run end: SampleDB \S+/idem", count=runs + 2, timeout=180)
    last = re.findall(ended, log)[-2:]
    assert last == [("succeeded", "0")] * 2, last
    # nothing was written either: not one object of the database has a new resourceVersion
    assert versions(kube, namespace, "idem") == before


def versions(kube: Kube, namespace: str, name: str) -> dict[str, str]:
    """The resourceVersion of every object the roles write for a database (pods aside: kwok updates their status)."""
    listed = json.loads(kube.kubectl("-n", namespace, "get",
                                     "statefulset,configmap,service,secret,lease,poddisruptionbudget,cronjob",
                                     "-l", f"app.kubernetes.io/instance={name}", "-o", "json").stdout)["items"]
    out = {f"{o['kind'].lower()}/{o['metadata']['name']}": o["metadata"]["resourceVersion"] for o in listed}
    assert {f"statefulset/{name}", f"configmap/{name}-config", f"service/{name}-primary", f"lease/{name}-primary",
            f"secret/{name}-credentials"} <= set(out), out
    return out


def test_an_object_of_another_application_with_the_databases_name_is_never_taken_over(
        kube: Kube, namespace: str, sampledb_operators) -> None:
    sampledb_operators()
    kube.kubectl("-n", namespace, "create", "configmap", "web-config", "--from-literal=theme=dark")
    kube.custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, sample("web", replicas=1))

    def told() -> str:
        conditions = get(kube, namespace, "web").get("status", {}).get("conditions") or []
        return next((c["message"] for c in conditions if "ConfigMap web-config already exist" in c.get("message", "")),
                    "")

    message = wait_for("the refusal in status", told, timeout=120)
    assert "not this SampleDB's" in message and "rename the SampleDB or remove them" in message
    assert get(kube, namespace, "web")["status"].get("phase") != "Ready"
    cm = kube.core.read_namespaced_config_map("web-config", namespace)
    assert cm.data == {"theme": "dark"} and not cm.metadata.owner_references
    assert not kube.apps.list_namespaced_stateful_set(namespace).items  # nothing was made


def test_the_servers_spread_over_nodes_and_required_leaves_a_server_pending_rather_than_share_one(
        kube: Kube, namespace: str, sampledb_operators) -> None:
    """By default (preferred anti-affinity on the hostname) three servers run on the local cluster's three nodes.
    With podAntiAffinityType required, a fourth server of another database finds no node of its own and stays
    Pending, its PodScheduled condition (and FailedScheduling Event) saying why, while that database's first three serve; the two databases do
    not repel each other."""
    sampledb_operators(failover_grace_seconds=0)
    kube.custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, sample("spread", replicas=3))
    wait_phase(kube, namespace, "spread", timeout=180)

    def nodes(name: str) -> dict[str, str | None]:
        return {p.metadata.name: p.spec.node_name for p in kube.core.list_namespaced_pod(
            namespace, label_selector=f"app.kubernetes.io/instance={name},statefulset.kubernetes.io/pod-name").items}
    placed = nodes("spread")
    assert len(placed) == 3 and len(set(placed.values())) == 3, placed

    kube.custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, sample(
        "strict", replicas=4, affinity={"podAntiAffinityType": "required"}))
    def unscheduled() -> list[str]:  # (the scheduler's latest word; its Events are aggregated)
        pods = kube.core.list_namespaced_pod(namespace, label_selector="app.kubernetes.io/instance=strict").items
        return [c.message for p in pods for c in p.status.conditions or []
                if c.type == "PodScheduled" and c.status == "False" and "anti-affinity" in (c.message or "")]
    why = wait_for("the fourth server to be refused a node for its anti-affinity", unscheduled, timeout=120)
    assert len(why) == 1 and "3 node(s) didn't match pod anti-affinity rules" in why[0], why
    wait_for("three strict servers Ready", lambda: get(kube, namespace, "strict").get("status", {})
             .get("readyReplicas") == 3, timeout=180)
    strict = nodes("strict")
    assert len(strict) == 4 and sorted(n is None for n in strict.values()) == [False, False, False, True], strict
    assert len({n for n in strict.values() if n}) == 3
    assert get(kube, namespace, "strict")["status"]["readyReplicasText"] == "3/4"


def test_a_drain_of_the_primarys_node_switches_over_first_then_evicts_it(
        kube: Kube, namespace: str, sampledb_operators) -> None:
    """`kubectl drain` of the primary's node: the primary's disruption budget refuses its eviction, the rollout role
    sees the node cordoned and switches over to a replica on another node (the old primary is fenced, relabelled
    replica, before its pod goes), the old primary's pod is evicted and made again elsewhere, and the drain
    completes, with no failover. The operator watches Nodes: the cordon brings the SampleDB back at once. On three kwok nodes of the test's own,
    which only this database tolerates (spec.affinity's nodeSelector and tolerations), so that the cordon and the
    evictions touch no other test's pods. (kwok's servers do not follow their labels: the old primary's pod is
    deleted once the fence timeout is over, as a hung primary's would be.)"""
    tag = namespace[-6:]
    names = [f"drain-{tag}-{i}" for i in range(3)]
    for name in names:
        kube.core.create_node({
            "metadata": {"name": name, "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
                         "labels": {"type": "kwok", "kubernetes.io/hostname": name, "sampledb-test": tag}},
            "spec": {"taints": [{"key": "sampledb-test", "value": tag, "effect": "NoSchedule"}]},
            "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "pods": "20"},
                       "capacity": {"cpu": "8", "memory": "32Gi", "pods": "20"}}})
    try:
        sampledb_operators(fence_timeout_seconds=3, watch_nodes=True)
        kube.custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, sample(
            "dr", replicas=2, affinity={"nodeSelector": {"sampledb-test": tag}, "tolerations": [
                {"key": "sampledb-test", "operator": "Equal", "value": tag, "effect": "NoSchedule"}]}))
        old = wait_for("dr Ready with a primary", lambda: (st := get(kube, namespace, "dr").get("status", {}))
                       .get("phase") == "Ready" and st.get("currentPrimary"), timeout=180)

        def placed() -> dict[str, str]:
            return {p.metadata.name: p.spec.node_name for p in kube.core.list_namespaced_pod(
                namespace, label_selector="app.kubernetes.io/instance=dr,statefulset.kubernetes.io/pod-name").items
                if not p.metadata.deletion_timestamp}
        before = placed()
        assert set(before.values()) <= set(names) and len(set(before.values())) == 2, before
        old_uid = kube.core.read_namespaced_pod(old, namespace).metadata.uid
        drained = kube.kubectl("drain", before[old], "--pod-selector=app.kubernetes.io/instance=dr",
                               "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=240s", timeout=260)
        assert drained.returncode == 0, drained.stderr
        # its primary's disruption budget held the eviction until the switchover had fenced it (relabelled replica)
        assert "violate the pod's disruption budget" in drained.stdout + drained.stderr, drained.stdout + drained.stderr
        new = wait_for("a new primary", lambda: (p := get(kube, namespace, "dr").get("status", {})
                                                 .get("currentPrimary")) not in (None, "", old) and p, timeout=120)
        switched = events(kube, namespace, "SwitchedOver")
        assert switched and new in switched[-1].message, [e.message for e in switched]
        assert not events(kube, namespace, "FailedOver")
        # the cordon itself brought the SampleDB back (the operator watches Nodes), not its next resync
        annotations = get(kube, namespace, "dr")["metadata"].get("annotations") or {}
        assert annotations.get("sampledb.example.com/primary-node-cordoned", "").split()[:1] == [before[old]], annotations
        now = wait_for("the old primary made again on another node", lambda: (p := placed()).get(old) and p,
                       timeout=120)
        assert now[old] != before[old] and now[new] != before[old], now
        assert kube.core.read_namespaced_pod(old, namespace).metadata.uid != old_uid
        wait_phase(kube, namespace, "dr", timeout=180)
    finally:
        for name in names:
            kube.kubectl("delete", "node", name, "--wait=false", check=False)
