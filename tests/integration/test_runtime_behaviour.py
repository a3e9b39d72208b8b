"""Scheduling, predicates, status, finalizers, artifacts and endpoints of the runtime, on the real cluster."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from ansible.release import __version__ as ansible_version

from tests.kube import Kube, wait_for
from tests.operator import TESTOP, Widgets, widget_watch

FINALIZER = "test.playbook-operator.dev/cleanup"


def run_times(log: str, name: str, what: str = "start") -> list[float]:
    """Start (or end) times, in epoch seconds, of the runs of one object, from the operator's log lines."""
    stamps = re.findall(rf"^(\S+ \S+) INFO .*run {what}: Widget \S+/{re.escape(name)} ", log, re.M)
    return [time.mktime(time.strptime(s.split(",")[0], "%Y-%m-%d %H:%M:%S")) + int(s.split(",")[1]) / 1000
            for s in stamps]


def test_extravars_contract(kube: Kube, namespace: str, widgets: Widgets, start_operator) -> None:
    dump = str(TESTOP / "roles" / "dump")
    start_operator([widget_watch(role=dump, vars={"from_watch": "yes", "meta_copy": "{{ ansible_operator_meta }}"})])
    widgets.create("plain", {"egressIPs": ["10.0.0.1"], "templateMe": "{{ 6 * 7 }}"})
    widgets.wait_successful("plain")
    data = kube.core.read_namespaced_config_map("plain-vars", namespace).data
    assert json.loads(data["meta"]) == {"name": "plain", "namespace": namespace}
    assert data["object_kind"] == "Widget"
    # the raw spec keeps its keys as written; like every extra-var, Jinja in it is evaluated (as upstream),
    # to a native value from ansible-core 2.19 on, to a string before
    native = tuple(int(n) for n in ansible_version.split(".")[:2]) >= (2, 19)
    assert json.loads(data["raw_spec"]) == {"egressIPs": ["10.0.0.1"], "templateMe": 42 if native else "42"}
    assert json.loads(data["egress"]) == ["10.0.0.1"]  # egressIPs → egress_ips
    assert data["templated"] == "42"  # without markUnsafe, Jinja in the spec is evaluated (as upstream)
    assert data["from_watch"] == "yes"
    assert json.loads(data["from_watch_jinja"]) == {"name": "plain", "namespace": namespace}


def test_mark_unsafe_and_no_snake_case(kube: Kube, namespace: str, widgets: Widgets, start_operator) -> None:
    start_operator([widget_watch(role=str(TESTOP / "roles" / "dump"), markUnsafe=True, snakeCaseParameters=False)])
    widgets.create("unsafe", {"egressIPs": ["10.0.0.2"], "template_me": "{{ lookup('env', 'HOME') }}"})
    widgets.wait_successful("unsafe")
    data = kube.core.read_namespaced_config_map("unsafe-vars", namespace).data
    assert data["templated"] == "{{ lookup('env', 'HOME') }}"  # never templated
    assert json.loads(data["egress"]) == ["10.0.0.2"]  # egressIPs kept as written


def test_only_spec_changes_trigger_runs(widgets: Widgets, start_operator) -> None:
    op = start_operator([widget_watch()])
    widgets.create("w", {"message": "a"})
    widgets.wait_successful("w")
    time.sleep(3)
    assert len(op.runs("w")) == 1, op.runs("w")  # our own status writes did not trigger anything
    widgets.patch_status("w", {"status": {"external": "written by someone else"}})
    widgets.patch("w", {"metadata": {"labels": {"team": "x"}, "annotations": {"note": "hi"}}})
    time.sleep(3)
    assert len(op.runs("w")) == 1, op.runs("w")
    widgets.patch("w", {"spec": {"message": "b"}})
    widgets.wait_successful("w", generation=2)
    op.wait_for_log(r"run end: Widget \S+/w succeeded", count=2)
    time.sleep(1)
    assert len(op.runs("w")) == 2


def test_annotation_changes_trigger_with_watch_annotations_changes(widgets: Widgets, start_operator) -> None:
    op = start_operator([widget_watch(watchAnnotationsChanges=True)])
    widgets.create("w", {"message": "a"})
    widgets.wait_successful("w")
    widgets.patch("w", {"metadata": {"annotations": {"note": "rerun please"}}})
    op.wait_for_log(r"run end: Widget \S+/w succeeded", count=2)


def test_a_change_during_a_run_gives_exactly_one_more_run(kube: Kube, namespace: str, widgets: Widgets,
                                                          start_operator) -> None:
    op = start_operator([widget_watch()])
    widgets.create("slow", {"message": "first", "sleep": 4})
    op.wait_for_log(r"run start: Widget \S+/slow")
    running = widgets.wait_condition("slow", "Running", "True")
    assert next(c for c in running["status"]["conditions"] if c["type"] == "Running")["reason"] == "Running"
    for i in range(3):
        widgets.patch("slow", {"spec": {"message": f"change {i}", "sleep": 1}})
        time.sleep(0.3)
    widgets.wait_successful("slow", generation=4, timeout=60)
    time.sleep(2)
    assert len(op.runs("slow")) == 2, op.runs("slow")
    assert kube.core.read_namespaced_config_map("slow-cm", namespace).data["message"] == "change 2"


def test_failures_back_off_exponentially(widgets: Widgets, start_operator) -> None:
    op = start_operator([widget_watch()], "--retry-backoff-base", "500ms", "--retry-backoff-max", "4s")
    widgets.create("bad", {"fail": True})
    op.wait_for_log(r"run end: Widget \S+/bad FAILED", count=4, timeout=30)
    starts, ends = run_times(op.logs(), "bad"), run_times(op.logs(), "bad", "end")
    waits = [start - end for end, start in zip(ends, starts[1:], strict=False)][:3]  # from a failure to the retry
    assert 0.45 <= waits[0] < 0.95 and 0.95 <= waits[1] < 1.9 and 1.95 <= waits[2] < 3.9, waits  # 0.5 s, 1 s, 2 s


def test_requeue_after_from_the_role(widgets: Widgets, start_operator) -> None:
    op = start_operator([widget_watch()])
    widgets.create("again", {"requeue": "1s"})
    op.wait_for_log(r"run end: Widget \S+/again succeeded", count=4, timeout=90)
    reasons = re.findall(r"run start: Widget \S+/again .*\[(\w+)\]", op.logs())
    assert reasons[0] == "change" and set(reasons[1:]) == {"requeue"}
    # unlike upstream, requeue_after does not skip the status update of the run
    assert widgets.condition("again", "Successful")["status"] == "True"


def test_idle_resyncs_write_nothing(kube: Kube, namespace: str, widgets: Widgets, start_operator) -> None:
    op = start_operator([widget_watch(reconcilePeriod="1s")])
    widgets.create("idle", {"message": "steady"})
    widgets.wait_successful("idle")
    # The first resync may write once: its counts differ from the creating run's (nothing to create).
    op.wait_for_log(r"run end: Widget \S+/idle succeeded", count=3, timeout=30)
    rv = widgets.get("idle")["metadata"]["resourceVersion"]
    events_before = len(kube.core.list_namespaced_event(namespace).items)
    op.wait_for_log(r"run end: Widget \S+/idle succeeded", count=6, timeout=30)
    assert widgets.get("idle")["metadata"]["resourceVersion"] == rv  # no status write at all
    assert len(kube.core.list_namespaced_event(namespace).items) == events_before


def test_reconcile_period_annotation(widgets: Widgets, start_operator) -> None:
    op = start_operator([widget_watch()])
    widgets.create("fast", {}, annotations={"ansible.sdk.operatorframework.io/reconcile-period": "1s"})
    op.wait_for_log(r"run end: Widget \S+/fast succeeded", count=3, timeout=30)
    widgets.create("typo", {}, annotations={"ansible.sdk.operatorframework.io/reconcile-period": "one minute"})
    obj = widgets.wait_condition("typo", "Failure", "True")
    msg = next(c for c in obj["status"]["conditions"] if c["type"] == "Failure")["message"]
    assert "ansible.sdk.operatorframework.io/reconcile-period" in msg and "'one minute'" in msg


def test_finalizer_runs_before_the_object_goes(kube: Kube, namespace: str, widgets: Widgets, start_operator) -> None:
    op = start_operator([widget_watch(finalizer={"name": FINALIZER, "role": str(TESTOP / "roles" / "widget_finalizer"),
                                                 "vars": {"cleanup_mode": "thorough"}})])
    widgets.create("f", {"message": "x"})
    widgets.wait_successful("f")
    assert FINALIZER in widgets.get("f")["metadata"]["finalizers"]
    widgets.delete("f")
    wait_for("the Widget to be gone", lambda: not widgets.exists("f"), timeout=60)
    receipt = kube.core.read_namespaced_config_map("f-finalized", namespace)
    assert receipt.data == {"cleanup": "thorough"}  # the finalizer's vars reached its role
    log = op.logs()
    assert "finalizer end: Widget" in log
    # the log names what ran: the finalizer's role, not the watch's main one
    assert re.search(r"finalizer start: Widget \S+/f \(role \S*widget_finalizer\)", log), log


def test_failing_finalizer_keeps_the_object_until_fixed(widgets: Widgets, start_operator) -> None:
    start_operator([widget_watch(finalizer={"name": FINALIZER, "role": str(TESTOP / "roles" / "widget_finalizer")})])
    widgets.create("stuck", {"failFinalizer": True})
    widgets.wait_successful("stuck")
    widgets.delete("stuck")
    obj = widgets.wait_condition("stuck", "Failure", "True")
    assert obj["metadata"].get("deletionTimestamp")
    msg = next(c for c in obj["status"]["conditions"] if c["type"] == "Failure")["message"]
    assert msg == "finalizer refused: stuck still in use"
    time.sleep(2)
    assert widgets.exists("stuck")
    widgets.patch("stuck", {"spec": {"failFinalizer": False}})
    wait_for("the Widget to be gone", lambda: not widgets.exists("stuck"), timeout=60)


def test_a_finalizer_that_requeues_is_not_finished(kube: Kube, namespace: str, widgets: Widgets,
                                                  start_operator) -> None:
    op = start_operator([widget_watch(finalizer={"name": FINALIZER, "role": str(TESTOP / "roles" / "widget_finalizer")})])
    widgets.create("waiting", {"holdFinalizer": True})
    widgets.wait_successful("waiting")
    widgets.delete("waiting")
    op.wait_for_log(r"finalizer end: Widget \S+/waiting succeeded", count=3, timeout=30)
    assert widgets.exists("waiting") and FINALIZER in widgets.get("waiting")["metadata"]["finalizers"]
    widgets.patch("waiting", {"spec": {"holdFinalizer": False}})
    wait_for("the Widget to be gone", lambda: not widgets.exists("waiting"), timeout=60)
    kube.core.read_namespaced_config_map("waiting-finalized", namespace)


def test_delete_during_a_run_waits_then_finalizes(kube: Kube, namespace: str, widgets: Widgets,
                                                  start_operator) -> None:
    op = start_operator([widget_watch(finalizer={"name": FINALIZER, "role": str(TESTOP / "roles" / "widget_finalizer")})])
    widgets.create("busy", {"sleep": 3})
    op.wait_for_log(r"run start: Widget \S+/busy")
    wait_for("the finalizer to be added", lambda: FINALIZER in (widgets.get("busy")["metadata"].get("finalizers") or []))
    widgets.delete("busy")
    wait_for("the Widget to be gone", lambda: not widgets.exists("busy"), timeout=60)
    log = op.logs()
    assert log.index("run end: Widget") < log.index("finalizer start: Widget")  # the run finished first
    kube.core.read_namespaced_config_map("busy-finalized", namespace)


def test_manage_status_false_leaves_status_alone(widgets: Widgets, start_operator) -> None:
    op = start_operator([widget_watch(manageStatus=False)])
    widgets.create("mine", {"message": "m"})
    op.wait_for_log(r"run end: Widget \S+/mine succeeded")
    status = widgets.get("mine").get("status") or {}
    assert "conditions" not in status and "observedGeneration" not in status
    assert status["message"] == "m"  # what the role wrote itself


def test_selector_limits_what_is_reconciled(widgets: Widgets, start_operator) -> None:
    op = start_operator([widget_watch(selector={"matchLabels": {"managed": "yes"}})])
    widgets.create("other", {})
    widgets.create("mine", {}, labels={"managed": "yes"})
    widgets.wait_successful("mine")
    time.sleep(2)
    assert not (widgets.get("other").get("status") or {}).get("conditions")
    assert op.runs("other") == []
    widgets.patch("other", {"metadata": {"labels": {"managed": "yes"}}})
    widgets.wait_successful("other")


def test_endpoints_metrics_and_user_metrics(widgets: Widgets, start_operator) -> None:
    op = start_operator([widget_watch()])
    assert op.http_get("/healthz") == (200, "ok")
    assert op.http_get("/readyz") == (200, "ok")
    widgets.create("m1", {})
    widgets.create("m2", {"fail": True})
    widgets.wait_successful("m1")
    widgets.wait_condition("m2", "Failure")
    code, text = op.http_get("/metrics", "metrics")
    assert code == 200
    assert re.search(r'^playbook_operator_runs_total\{kind="Widget"\} [1-9]', text, re.M)
    assert re.search(r'^playbook_operator_runs_failed_total\{kind="Widget"\} [1-9]', text, re.M)
    assert re.search(r'^ansible_operator_reconciles_count\{GVK=".*Widget"\} [1-9]', text, re.M)
    assert re.search(r'^playbook_operator_queue_depth\{kind="Widget"\}', text, re.M)
    assert re.search(r"^widget_reconciles_total [1-9]", text, re.M)  # osdk_metric from the role
    assert "# HELP widget_reconciles_total Widget reconciles that reached the end of the role" in text
    # what each object's status says, as long as the object exists
    assert re.search(r'^playbook_operator_resource_condition\{group="[^"]+",kind="Widget",name="m2",namespace="[^"]+",'
                     r'reason="Failed",status="True",type="Failure"\} 1\.0', text, re.M)
    assert re.search(r'^playbook_operator_resource_condition\{[^}]*name="m1"[^}]*status="True",type="Successful"\} 1',
                     text, re.M)
    widgets.delete("m1")
    wait_for("m1 gone", lambda: not widgets.exists("m1"))
    wait_for("m1's series gone", lambda: 'name="m1"' not in op.http_get("/metrics", "metrics")[1])


def test_the_go_operators_controller_runtime_metrics(namespace: str, widgets: Widgets, start_operator) -> None:
    """Dashboards and alerts made for the Go operator read controller-runtime's and client-go's series: the
    same names, labels and label values (controller-runtime v0.21, as in ansible-operator v1.42)."""
    op = start_operator([widget_watch()], "--leader-elect", "--leader-election-id", "metrics-lock",
                        "--leader-election-namespace", namespace)
    widgets.create("ok", {})
    widgets.create("broken", {"fail": True})
    widgets.wait_successful("ok")
    widgets.wait_condition("broken", "Failure")
    wait_for("a retry of the broken one", lambda: len(op.runs("broken")) >= 2, timeout=30)
    text = op.http_get("/metrics", "metrics")[1]
    controller = 'controller="widget-v1alpha1-controller"'
    queue = f'{controller},name="widget-v1alpha1-controller"'
    for series in (rf'controller_runtime_reconcile_total\{{{controller},result="requeue_after"\}} [1-9]',
                   rf'controller_runtime_reconcile_total\{{{controller},result="error"\}} [1-9]',
                   rf'controller_runtime_reconcile_total\{{{controller},result="success"\}} ',
                   rf'controller_runtime_reconcile_total\{{{controller},result="requeue"\}} 0\.0',
                   rf'controller_runtime_reconcile_errors_total\{{{controller}\}} [1-9]',
                   rf'controller_runtime_reconcile_time_seconds_bucket\{{{controller},le="0\.005"\}} ',
                   rf'controller_runtime_max_concurrent_reconciles\{{{controller}\}} [1-9]',
                   rf'controller_runtime_active_workers\{{{controller}\}} ',
                   rf'workqueue_depth\{{{queue},priority=""\}} ',
                   rf'workqueue_adds_total\{{{queue}\}} [1-9]',
                   rf'workqueue_retries_total\{{{queue}\}} [1-9]',
                   rf'workqueue_queue_duration_seconds_bucket\{{{controller},le="1e-08",name="widget-v1alpha1-controller"\}} ',
                   rf'workqueue_work_duration_seconds_count\{{{queue}\}} [1-9]',
                   rf'workqueue_unfinished_work_seconds\{{{queue}\}} ',
                   rf'workqueue_longest_running_processor_seconds\{{{queue}\}} ',
                   r'leader_election_master_status\{name="metrics-lock"\} 1\.0',
                   r'rest_client_requests_total\{code="200",host="127\.0\.0\.1:\d+",method="GET"\} [1-9]',
                   r'rest_client_requests_total\{code="201",host="127\.0\.0\.1:\d+",method="POST"\} [1-9]'):
        assert re.search(f"^{series}", text, re.M), series


def test_role_events_and_custom_conditions(kube: Kube, namespace: str, widgets: Widgets, start_operator) -> None:
    start_operator([widget_watch()])
    widgets.create("ev", {"emitEvent": "WidgetPolished", "readyCondition": True, "message": "shiny"})
    obj = widgets.wait_successful("ev")
    types = {c["type"] for c in obj["status"]["conditions"]}
    assert {"Ready", "Running", "Successful"} <= types  # the role's condition and the runtime's coexist
    ready = next(c for c in obj["status"]["conditions"] if c["type"] == "Ready")
    assert ready["reason"] == "ConfigMapWritten" and ready["message"] == "shiny" and ready["lastTransitionTime"]
    ev = kube.core.read_namespaced_event("ev-widgetpolished", namespace)
    assert ev.reason == "WidgetPolished" and ev.involved_object.uid == obj["metadata"]["uid"]
    widgets.patch("ev", {"spec": {"message": "shinier"}})
    widgets.wait_successful("ev", generation=2)
    assert kube.core.read_namespaced_event("ev-widgetpolished", namespace).count == 2


def test_artifacts_bounded_and_free_of_secrets(kube: Kube, namespace: str, widgets: Widgets,
                                               start_operator) -> None:
    op = start_operator([widget_watch(maxRunnerArtifacts=2)])
    kube.core.create_namespaced_secret(namespace, {"metadata": {"name": "source"},
                                                   "stringData": {"password": "hunter2-do-not-log"}})
    widgets.create("s", {"copySecret": "source", "message": "v0"})
    widgets.wait_successful("s")
    for i in range(1, 4):
        widgets.patch("s", {"spec": {"message": f"v{i}"}})
        widgets.wait_successful("s", generation=i + 1)
    obj_dir = next(op.artifacts.glob("test.playbook-operator.dev/v1alpha1/Widget/*/s"))
    runs = [p for p in (obj_dir / "artifacts").iterdir() if p.is_dir()]
    assert len(runs) == 2
    assert not (obj_dir / "env" / "extravars").exists() and not (obj_dir / "env" / "envvars").exists()
    assert (runs[0] / "job_events").is_dir() and (runs[0] / "stdout").exists()
    leaked = subprocess.run(["grep", "-rl", "hunter2-do-not-log", str(op.artifacts)], capture_output=True, text=True)
    assert leaked.stdout == ""
    import base64

    encoded = base64.b64encode(b"hunter2-do-not-log").decode()
    assert subprocess.run(["grep", "-rl", encoded, str(op.artifacts)], capture_output=True, text=True).stdout == ""
    assert "hunter2" not in op.logs()
    copied = kube.core.read_namespaced_secret("s-secret", namespace)  # the role itself saw the data
    assert base64.b64decode(copied.data["password"]) == b"hunter2-do-not-log"


def test_a_deleted_objects_artifacts_go_with_it(widgets: Widgets, start_operator) -> None:
    op = start_operator([widget_watch()])
    widgets.create("brief", {})
    widgets.wait_successful("brief")
    obj_dir = next(op.artifacts.glob("test.playbook-operator.dev/v1alpha1/Widget/*/brief"))
    assert any((obj_dir / "artifacts").iterdir())
    widgets.delete("brief")
    wait_for("its runner directories to be removed", lambda: not obj_dir.exists(), timeout=30)


def test_keep_no_artifacts(widgets: Widgets, start_operator) -> None:
    op = start_operator([widget_watch(maxRunnerArtifacts=0)])
    widgets.create("none", {})
    widgets.wait_successful("none")
    obj_dir = next(op.artifacts.glob("test.playbook-operator.dev/v1alpha1/Widget/*/none"))
    assert [p for p in (obj_dir / "artifacts").iterdir() if p.is_dir()] == []


def test_an_edited_role_applies_on_the_next_run(kube: Kube, namespace: str, widgets: Widgets, start_operator,
                                               tmp_path: Path) -> None:
    """Defaults, a module in the role's library/, the module_utils it imports from the role's module_utils/
    and a filter in its filter_plugins/, each edited in place: the next run uses the new ones (whatever the
    runtime keeps between runs, such as built module payloads)."""
    role = tmp_path / "roles" / "editable"
    shutil.copytree(TESTOP / "roles" / "widget", role)
    (role / "library").mkdir()
    module = role / "library" / "widget_word.py"
    module.write_text(WORD_MODULE.replace("SAYS", "first"))
    (role / "module_utils").mkdir()
    util = role / "module_utils" / "widget_words.py"
    util.write_text('UTIL_WORD = "first"\n')
    (role / "filter_plugins").mkdir()
    filters = role / "filter_plugins" / "widget_filters.py"
    filters.write_text(MARK_FILTER.replace("MARK", "first"))
    with (role / "tasks" / "main.yml").open("a") as tasks:
        tasks.write(WORD_TASKS)
    op = start_operator([widget_watch(role=str(role))])
    widgets.create("e", {})
    widgets.wait_successful("e")
    assert kube.core.read_namespaced_config_map("e-cm", namespace).data["message"] == "hello"
    assert kube.core.read_namespaced_config_map("e-words", namespace).data == {"module": "first", "util": "first",
                                                                               "filter": "first"}

    (role / "defaults" / "main.yml").write_text((role / "defaults" / "main.yml").read_text()
                                                 .replace("message: hello", "message: edited in place"))
    module.write_text(WORD_MODULE.replace("SAYS", "edited"))
    util.write_text('UTIL_WORD = "edited"\n')
    filters.write_text(MARK_FILTER.replace("MARK", "edited"))
    widgets.patch("e", {"spec": {"other": 1}})
    widgets.wait_successful("e", generation=2)
    assert kube.core.read_namespaced_config_map("e-cm", namespace).data["message"] == "edited in place"
    assert kube.core.read_namespaced_config_map("e-words", namespace).data == {"module": "edited", "util": "edited",
                                                                               "filter": "edited"}
    assert op.proc is not None and op.proc.poll() is None  # same operator process


WORD_MODULE = """
from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.widget_words import UTIL_WORD

if __name__ == "__main__":
    AnsibleModule(argument_spec={}).exit_json(changed=False, word="SAYS", util=UTIL_WORD)
"""
MARK_FILTER = """
class FilterModule:
    def filters(self):
        return {"widget_mark": lambda value: "MARK"}
"""
WORD_TASKS = """
- name: A module shipped in the role
  widget_word: {}
  register: word

- name: What the role's module and filter say
  kubernetes.core.k8s:
    state: present
    definition:
      apiVersion: v1
      kind: ConfigMap
      metadata:
        name: "{{ ansible_operator_meta.name }}-words"
      data:
        module: "{{ word.word }}"
        util: "{{ word.util }}"
        filter: "{{ 'x' | widget_mark }}"
"""


def test_invalid_watches_file_stops_start_up(tmp_path: Path) -> None:
    bad = tmp_path / "watches.yaml"
    bad.write_text("- {version: v1, group: g.example.com, kind: K, role: nosuchrole, reconcilePeriod: 5 min}\n")
    proc = subprocess.run([sys.executable, "-m", "runner", "run", "--watches-file", str(bad)],
                          capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert proc.returncode == 2
    assert f"{bad}: entry 1 (g.example.com/v1, Kind=K): field 'role': role 'nosuchrole' not found" in proc.stderr


def test_ansible_args_and_verbosity_annotation(kube: Kube, namespace: str, widgets: Widgets, start_operator) -> None:
    op = start_operator([widget_watch()], "--ansible-args", "--skip-tags events", "--ansible-verbosity", "0")
    widgets.create("quiet", {"emitEvent": "Skipped"}, annotations={"ansible.sdk.operatorframework.io/verbosity": "3"})
    widgets.wait_successful("quiet")
    events = [e for e in kube.core.list_namespaced_event(namespace).items if e.reason == "Skipped"]
    assert events == []  # the tagged task was skipped by --ansible-args
    run_dir = next(op.artifacts.glob("test.playbook-operator.dev/v1alpha1/Widget/*/quiet/artifacts/*"))
    command = json.loads((run_dir / "command").read_text())["command"]
    assert "-vvv" in command and "--skip-tags" in command  # the annotation beats --ansible-verbosity
    assert "<localhost> EXEC" in (run_dir / "stdout").read_text()  # what -vvv prints


def test_ansible_debug_logs_shows_each_runs_output(widgets: Widgets, start_operator) -> None:
    """As the Go operator's ANSIBLE_DEBUG_LOGS (scaffolded manager.yaml files set it)."""
    op = start_operator([widget_watch()], env={"ANSIBLE_DEBUG_LOGS": "True"})
    widgets.create("verbose", {})
    widgets.wait_successful("verbose")
    log = op.wait_for_log(r"Widget \S+/verbose: ansible output:")
    assert re.search(r"PLAY RECAP \*+\nlocalhost +: ok=", log)
