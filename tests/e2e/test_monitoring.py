"""Monitoring on the real node: a real Prometheus (Debian's) scrapes a SampleDB's exporters (found by their
annotations, as deploy/monitoring's scrape configs say) and the operator; promtool proves every alert in
deploy/monitoring/prometheusrule.yaml fires and clears on series taken from that Prometheus; every query of the
Grafana dashboard returns data from it."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import yaml

from tests.kube import Kube, wait_for
from tests.operator import ROOT
from tests.prometheus import Prometheus, binaries, pod_target_groups
from tests.realnode import NODE_LANE, delete_pod, psql_in_server, ready_database
from tests.sampledb import backup, backup_status, events, get

pytestmark = NODE_LANE

MONITORING = ROOT / "deploy" / "monitoring"


def scrape_configs(pods_file: Path, operator_metrics: str) -> list[dict[str, Any]]:
    """deploy/monitoring's scrape configs, their relabelling as written. Debian's Prometheus has no Kubernetes
    discovery: the pods come through ``pods_file`` (write_pods) as kubernetes_sd would give them. The operator
    runs on this machine, not in a pod, so its job scrapes it directly (honor_labels as there)."""
    configs = yaml.safe_load((MONITORING / "prometheus-scrape-configs.yaml").read_text())
    servers = next(c for c in configs if c["job_name"] == "sampledb-servers")
    servers.pop("kubernetes_sd_configs")
    servers["file_sd_configs"] = [{"files": [str(pods_file)], "refresh_interval": "5s"}]
    operator = next(c for c in configs if c["job_name"] == "sampledb-operator")
    operator.pop("kubernetes_sd_configs")
    operator.pop("relabel_configs")
    operator["static_configs"] = [{"targets": [operator_metrics]}]
    return [servers, operator]


def write_pods(kube: Kube, namespace: str, path: Path) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(pod_target_groups(kube.core.list_namespaced_pod(namespace).items)))
    tmp.replace(path)  # file_sd must never read half a file


def dashboard_queries() -> list[tuple[str, str]]:
    dash = json.loads((MONITORING / "grafana-dashboard.json").read_text())
    out = [(p["title"], t["expr"]) for p in dash["panels"] for t in p["targets"]]
    out += [(f"variable {v['name']}", v["definition"]) for v in dash["templating"]["list"] if v["type"] == "query"]
    return out


def as_promql(expr: str, namespace: str, database: str) -> str:
    """A dashboard query as Grafana sends it: its variables replaced (label_values() by its selector)."""
    expr = expr.replace("$__rate_interval", "1m").replace("$namespace", namespace).replace("$sampledb", database)
    m = re.fullmatch(r"label_values\((.*),\s*\w+\)", expr)
    return m.group(1) if m else expr


def render(template: str, labels: dict[str, str]) -> str:
    return re.sub(r"\{\{\s*\$labels\.(\w+)\s*\}\}", lambda m: labels.get(m.group(1), ""), template)


def series(labels: dict[str, str]) -> str:
    name = labels["__name__"]
    rest = ", ".join(f'{k}="{v}"' for k, v in sorted(labels.items()) if k != "__name__")
    return f"{name}{{{rest}}}"


def test_prometheus_scrapes_the_servers_and_the_operator_and_the_alerts_and_dashboard_work(
        node_to_itself: None, real: Kube, real_namespace: str, real_sampledb_operator, tmp_path: Path) -> None:
    ns, name = real_namespace, "mon"
    operator = real_sampledb_operator()
    db = ready_database(real, ns, name, replicas=2, monitoring={"enabled": True})
    servers = real.core.list_namespaced_pod(
        ns, label_selector=f"app.kubernetes.io/instance={name},statefulset.kubernetes.io/pod-name").items
    assert len(servers) == 2
    for pod in servers:
        assert [c.name for c in pod.spec.containers] == ["postgres", "exporter"]
        assert pod.metadata.annotations["prometheus.io/scrape"] == "true"
    # some transactions to count, and a backup whose age the dashboard shows
    primary = db["status"]["currentPrimary"]
    psql_in_server(real, ns, primary, "create table t(i int); insert into t select generate_series(1, 1000)",
                   database="app")
    backup(real, ns, "mon-b1", database=name)
    wait_for("the backup to complete", lambda: backup_status(real, ns, "mon-b1").get("phase") == "Completed",
             timeout=300, interval=2)

    (tmp_path / "prom").mkdir()
    pods_file = tmp_path / "prom" / "pods.json"
    write_pods(real, ns, pods_file)
    prom = Prometheus(tmp_path / "prom", scrape_configs(pods_file, f"127.0.0.1:{operator.port('metrics')}"))
    prom.start()
    try:
        wait_for("Prometheus to scrape both servers and the operator", lambda: len(
            [t for t in prom.targets() if t["health"] == "up"]) == 3, timeout=120, interval=2)

        # A real failover (the counter the failover alert reads, a new timeline): the primary's pod is deleted
        # while the node takes no new pods, so its replacement cannot come back in time (node_to_itself: no other
        # test's pods or operators see the node cordoned).
        node = real.core.read_namespaced_pod(primary, ns).spec.node_name
        real.core.patch_node(node, {"spec": {"unschedulable": True}})
        try:
            delete_pod(real, ns, primary)
            wait_for("the failover", lambda: events(real, ns, "FailedOver") or None, timeout=180, interval=1)
        finally:
            real.core.patch_node(node, {"spec": {"unschedulable": False}})
        wait_for("the database Ready again", lambda: get(real, ns, name)["status"].get("phase") == "Ready"
                 and get(real, ns, name)["status"].get("currentPrimary") not in ("", None, primary), timeout=300)
        wait_for("the old primary back as a replica", lambda: psql_in_server(
            real, ns, primary, "select pg_is_in_recovery()", check=False) == "t", timeout=300, interval=2)
        write_pods(real, ns, pods_file)  # its new address, and the role labels as they are now

        # every dashboard query returns data (rates need a few scrapes of the new primary)
        missing: dict[str, str] = {}

        def all_answer() -> bool:
            missing.clear()
            for title, expr in dashboard_queries():
                if not prom.query(as_promql(expr, ns, name)):
                    missing[title] = expr
            return not missing

        try:
            wait_for("every dashboard query to return data", all_answer, timeout=180, interval=5)
        except AssertionError:
            raise AssertionError(f"dashboard queries without data: {json.dumps(missing, indent=1)}") from None
        # the series mean what they say
        assert {s["metric"]["pod"]: s["value"][1] for s in prom.query(f'sampledb_wal_is_primary{{namespace="{ns}"}} == 1')} \
            == {get(real, ns, name)["status"]["currentPrimary"]: "1"}
        assert [s["value"][1] for s in prom.query(
            f'sampledb_primary_changes_total{{namespace="{ns}", sampledb="{name}", reason="failover"}}')] == ["1"]

        _prove_alerts(prom, ns, name, tmp_path)
    finally:
        prom.stop()


def _taken(prom: Prometheus, selector: str) -> tuple[dict[str, str], float]:
    """The labels and value of a series Prometheus has."""
    found = prom.query(selector)
    assert found, f"no series {selector} in Prometheus"
    return dict(found[0]["metric"]), float(found[0]["value"][1])


def _prove_alerts(prom: Prometheus, ns: str, name: str, tmp_path: Path) -> None:
    """A promtool unit test per alert: input series with the label sets Prometheus has from the cluster, values
    that make the alert fire and then clear, and the alert's labels and annotations as the rule renders them."""
    rules = yaml.safe_load((MONITORING / "prometheusrule.yaml").read_text())["spec"]
    alerts = {r["alert"]: r for g in rules["groups"] for r in g["rules"] if "alert" in r}
    rule_file = tmp_path / "rules.yml"
    rule_file.write_text(yaml.safe_dump(rules))

    def but(labels: dict[str, str], *drop: str, **override: str) -> dict[str, str]:
        """The labels an alert keeps of a series: some aggregated away, some values set by the test."""
        return {k: v for k, v in {**labels, **override}.items() if k not in drop}

    of_db = f'namespace="{ns}", sampledb="{name}"'
    ready, _ = _taken(prom, f'playbook_operator_resource_condition{{namespace="{ns}", name="{name}", type="Ready"}}')
    failure, _ = _taken(prom, f'playbook_operator_resource_condition{{namespace="{ns}", name="{name}", type="Failure"}}')
    up, _ = _taken(prom, f"pg_up{{{of_db}}}")
    lag, _ = _taken(prom, f"sampledb_replication_lag_bytes{{{of_db}}}")
    success, last_success = _taken(prom, f"sampledb_last_successful_backup_timestamp_seconds{{{of_db}}}")
    scheduled, _ = _taken(prom, f"sampledb_last_scheduled_backup_timestamp_seconds{{{of_db}}}")
    changes, _ = _taken(prom, f'sampledb_primary_changes_total{{{of_db}, reason="failover"}}')
    archive_lag, _ = _taken(prom, f"sampledb_archive_lag_seconds{{{of_db}}}")
    t = int(last_success)
    assert t > 0

    aggregated = ("instance", "job", "pod")
    down = but(ready, status="False", reason="PrimaryNotReady")
    failing = but(failure, status="True", reason="Failed")
    # alert: (input series with values at 1m steps, the labels the alert has, a time it fires, a time it is clear)
    cases: dict[str, tuple[list[tuple[dict[str, str], str]], dict[str, str], str, str]] = {
        "SampleDBPrimaryDown": ([(down, "1x4 stale")], but(down, *aggregated), "3m", "10m"),
        "SampleDBServerDown": ([(up, "1 0x5 1x5")], up, "4m", "9m"),
        "SampleDBReplicaLagging": ([(lag, f"0 {20 * 1024 * 1024}x5 0x5")], but(lag, "state", "sync_state"), "4m", "9m"),
        # the schedule started a backup just after the last success; one completes only 90 minutes later
        "SampleDBBackupMissed": ([(scheduled, f"{t + 60}x150"), (success, f"{t}x90 {t + 5400}x60")],
                                 but(scheduled, *aggregated), "70m", "100m"),
        # failing, then not read (another series: the alert keeps going), while an old NotConfigured one is ignored
        "SampleDBArchivingFailing": ([(but(ready, type="ContinuousArchiving", status="False",
                                           reason="ArchivingFailing"), "1x3 stale"),
                                      (but(ready, type="ContinuousArchiving", status="Unknown", reason="NotRead"),
                                       "_x3 1x5 stale"),
                                      (but(ready, type="ContinuousArchiving", status="False", reason="NotConfigured"),
                                       "1x20")],
                                     {"namespace": ready["namespace"], "name": ready["name"]}, "7m", "15m"),
        "SampleDBArchiveLagging": ([(archive_lag, "0 400x8 0x5")], but(archive_lag, *aggregated), "7m", "12m"),
        # a drill failed, the next passed; a database whose drills were switched off is not alerted on
        "SampleDBRecoveryVerificationFailed": ([(but(ready, type="RecoveryVerified", status="False",
                                                     reason="DrillFailed"), "_ 1x4 stale"),
                                                (but(ready, type="RecoveryVerified", status="False",
                                                     reason="NotConfigured"), "1x20")],
                                               {"namespace": ready["namespace"], "name": ready["name"]}, "3m", "10m"),
        # the operator's first failover: the series appears
        "SampleDBFailover": ([(changes, "_x20 1x40")], but(changes, *aggregated), "22m", "40m"),
        "PlaybookOperatorRunsFailing": ([(failing, "1x8 stale")], but(failing, *aggregated), "7m", "15m"),
    }
    assert set(cases) == set(alerts), "every alert in prometheusrule.yaml needs a case here"

    tests = []
    for alert, (inputs, labels, fires, clears) in cases.items():
        rule = alerts[alert]
        exp_labels = {k: v for k, v in {**labels, **rule.get("labels", {})}.items() if k != "__name__"}
        exp_annotations = {k: render(v, exp_labels) for k, v in rule.get("annotations", {}).items()}
        tests.append({
            "name": alert, "interval": "1m",
            "input_series": [{"series": series(s), "values": v} for s, v in inputs],
            "alert_rule_test": [
                {"eval_time": fires, "alertname": alert,
                 "exp_alerts": [{"exp_labels": exp_labels, "exp_annotations": exp_annotations}]},
                {"eval_time": clears, "alertname": alert, "exp_alerts": []},
            ]})
    test_file = tmp_path / "alerts-test.yml"
    test_file.write_text(yaml.safe_dump({"rule_files": [str(rule_file)], "evaluation_interval": "1m",
                                         "tests": tests}))
    _, promtool = binaries()
    checked = subprocess.run([str(promtool), "check", "rules", str(rule_file)], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    proved = subprocess.run([str(promtool), "test", "rules", str(test_file)], capture_output=True, text=True)
    assert proved.returncode == 0, f"{proved.stdout}{proved.stderr}\n{test_file.read_text()}"
    print(f"promtool: {len(tests)} alerts fire and clear on series from the cluster")
