"""Where the servers may run: spec.affinity as the pods' scheduling fields (roles/provision's sampledb_scheduling)."""

from __future__ import annotations

from tests.plugins import plugin

scheduling = plugin("roles/provision/filter_plugins/sampledb_provision.py").sampledb_scheduling
SERVERS = {"app.kubernetes.io/instance": "db", "sampledb.example.com/cluster": "db"}


def test_by_default_the_servers_prefer_a_node_each_and_spread_evenly() -> None:
    out = scheduling({}, SERVERS)
    term = {"labelSelector": {"matchLabels": SERVERS}, "topologyKey": "kubernetes.io/hostname"}
    assert out == {
        "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 100, "podAffinityTerm": term}]}},
        "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
                                       "whenUnsatisfiable": "ScheduleAnyway",
                                       "labelSelector": {"matchLabels": SERVERS}}]}
    assert scheduling(None, SERVERS) == out


def test_required_never_puts_two_servers_in_one_topology_domain() -> None:
    out = scheduling({"podAntiAffinityType": "required", "topologyKey": "topology.kubernetes.io/zone"}, SERVERS)
    assert out == {"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": SERVERS}, "topologyKey": "topology.kubernetes.io/zone"}]}}}


def test_spreading_can_be_switched_off_and_node_selection_is_passed_on() -> None:
    tolerations = [{"key": "dedicated", "operator": "Equal", "value": "db", "effect": "NoSchedule"}]
    out = scheduling({"enablePodAntiAffinity": False, "nodeSelector": {"disk": "ssd"}, "tolerations": tolerations},
                     SERVERS)
    assert out == {"nodeSelector": {"disk": "ssd"}, "tolerations": tolerations}
