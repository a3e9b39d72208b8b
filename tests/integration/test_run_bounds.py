"""What a CR's author or a role can ask of the runtime, bounded: periods that are not positive, runs that
never end, output a reader cannot decode, names at the limit."""

from __future__ import annotations

import time

from tests.kube import Kube, wait_for
from tests.operator import TESTOP, Widgets, session_processes, widget_watch

PERIOD = "ansible.sdk.operatorframework.io/reconcile-period"


def test_a_period_that_is_not_positive_is_refused_not_spun(widgets: Widgets, start_operator) -> None:
    """controller-runtime takes a requeue that is not positive as none: so does the runtime, saying why."""
    op = start_operator([widget_watch()])
    widgets.create("negative", {}, annotations={PERIOD: "-5m"})
    widgets.create("zero", {}, annotations={PERIOD: "0s"})
    widgets.wait_successful("negative")
    widgets.wait_successful("zero")
    time.sleep(8)  # a spinning object runs every second or faster
    assert len(op.runs("negative")) == 1, op.runs("negative")
    assert len(op.runs("zero")) == 1, op.runs("zero")
    assert "-5m" in op.wait_for_log(rf"WARNING .*{PERIOD}.*negative")
    widgets.patch("negative", {"spec": {"message": "changed"}})  # the object is still served
    widgets.wait_successful("negative", generation=2)


def test_a_run_that_never_ends_is_stopped_at_its_timeout(widgets: Widgets, start_operator) -> None:
    """A role waiting forever holds its object and a run slot: its run timeout (the watch's runTimeout, or
    the object's annotation) stops it, process group and all, and its Failure says which timeout."""
    op = start_operator([widget_watch(runTimeout="3s")])
    assert op.proc is not None
    idle = set(session_processes(op.proc.pid))
    widgets.create("stuck", {"sleep": 600})
    widgets.create("annotated", {"sleep": 600}, annotations={"playbook-operator.dev/run-timeout": "5s"})
    op.wait_for_log(r"run start: Widget \S+/(stuck|annotated)", count=2)
    time.sleep(1)
    first_runs = set(session_processes(op.proc.pid)) - idle  # the runs, their task workers, the modules waiting
    assert first_runs
    for name, timeout, source in (("stuck", "3s", "runTimeout"), ("annotated", "5s", "playbook-operator.dev/run-timeout")):
        failed = widgets.wait_condition(name, "Failure", "True", timeout=60)
        message = next(c for c in failed["status"]["conditions"] if c["type"] == "Failure")["message"]
        assert timeout in message and source in message, message
    wait_for("the timed-out runs' processes to go", lambda: not first_runs & set(session_processes(op.proc.pid)),
             timeout=10)


def test_runs_that_end_early_or_print_megabytes_end_in_a_failure(widgets: Widgets, start_operator) -> None:
    """A run that ends before its first task (a role Ansible cannot read); one that prints megabytes: each
    still gets its Failure condition (the object must not stay at Running=True)."""
    op = start_operator([widget_watch(role=str(TESTOP / "roles" / "garbled"))])
    widgets.create("garbled", {})
    failed = widgets.wait_condition("garbled", "Failure", "True", timeout=60)
    assert next(c for c in failed["status"]["conditions"] if c["type"] == "Running")["status"] == "False"
    op.stop()
    start_operator([widget_watch(role=str(TESTOP / "roles" / "noisy"))], name="noisy")
    widgets.create("noisy", {})
    failed = widgets.wait_condition("noisy", "Failure", "True", timeout=60)
    message = next(c for c in failed["status"]["conditions"] if c["type"] == "Failure")["message"]
    assert message == "noisy role failed on purpose"


def test_an_object_with_the_longest_name_gets_its_events(kube: Kube, namespace: str, widgets: Widgets,
                                                         start_operator) -> None:
    """Event names are the object's name and a digest: cut to fit Kubernetes' 253 characters."""
    start_operator([widget_watch()])
    name = "w" * 250
    widgets.create(name, {"fail": True})
    widgets.wait_condition(name, "Failure", "True", timeout=60)
    wait_for("its ReconcileFailed Event", lambda: [
        e for e in kube.core.list_namespaced_event(namespace).items
        if e.involved_object.name == name and e.reason == "ReconcileFailed"], timeout=30)
