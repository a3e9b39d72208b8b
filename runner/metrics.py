"""Prometheus metrics: the runtime's own, and the user metrics roles record with osdk_metric."""

from __future__ import annotations

import logging
import threading
from typing import Any

from prometheus_client import REGISTRY, Counter, Gauge, Histogram, Info, Summary

from . import __version__

log = logging.getLogger(__name__)

BUILD_INFO = Info("ansible_operator_build", "playbook-operator build information")
BUILD_INFO.info({"version": __version__, "runtime": "playbook-operator"})

RECONCILE_RESULT = Counter(
    "ansible_operator_reconcile_result", "Finished reconciles by kind and result (succeeded, failed)",
    ["GVK", "result"])
RUNS_TOTAL = Counter("playbook_operator_runs_total", "Ansible runs started, by kind", ["kind"])
RUNS_FAILED = Counter("playbook_operator_runs_failed_total", "Ansible runs that failed, by kind", ["kind"])
# The whole run, status writes included (upstream's histogram timed only the run's setup).
RECONCILE_SECONDS = Histogram(
    "ansible_operator_reconciles", "Duration of whole reconciles in seconds, by kind", ["GVK"],
    buckets=(0.1, 0.25, 0.5, 1, 2, 4, 8, 16, 32, 64, 128, 300))
QUEUE_DEPTH = Gauge("playbook_operator_queue_depth", "Objects waiting for a run, by kind", ["kind"])
IN_FLIGHT = Gauge("playbook_operator_runs_in_flight", "Runs in progress, by kind", ["kind"])
# The Go operator's controller-runtime (v0.21) and client-go series, with their names, help texts, labels
# and buckets, so that dashboards and alerts made for it work unchanged. A kind's controller is named as the Go
# operator names it (controller_name); its workqueue has that name too.
_CONTROLLER_RESULTS = ("error", "requeue_after", "requeue", "success")
RECONCILE_TOTAL = Counter("controller_runtime_reconcile_total", "Total number of reconciliations per controller",
                          ["controller", "result"])
RECONCILE_ERRORS = Counter("controller_runtime_reconcile_errors_total",
                           "Total number of reconciliation errors per controller", ["controller"])
TERMINAL_RECONCILE_ERRORS = Counter("controller_runtime_terminal_reconcile_errors_total",
                                    "Total number of terminal reconciliation errors per controller", ["controller"])
RECONCILE_PANICS = Counter("controller_runtime_reconcile_panics_total",
                           "Total number of reconciliation panics per controller", ["controller"])
RECONCILE_TIME = Histogram(
    "controller_runtime_reconcile_time_seconds", "Length of time per reconciliation per controller", ["controller"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0,
             1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5, 6, 7, 8, 9, 10, 15, 20, 25, 30, 40, 50, 60))
MAX_CONCURRENT_RECONCILES = Gauge("controller_runtime_max_concurrent_reconciles",
                                  "Maximum number of concurrent reconciles per controller", ["controller"])
ACTIVE_WORKERS = Gauge("controller_runtime_active_workers", "Number of currently used workers per controller",
                       ["controller"])
_WORKQUEUE_BUCKETS = tuple(10e-9 * 10 ** i for i in range(12))  # prometheus.ExponentialBuckets(10e-9, 10, 12)
WORKQUEUE_DEPTH = Gauge("workqueue_depth", "Current depth of workqueue by workqueue and priority",
                        ["name", "controller", "priority"])
WORKQUEUE_ADDS = Counter("workqueue_adds_total", "Total number of adds handled by workqueue", ["name", "controller"])
WORKQUEUE_LATENCY = Histogram("workqueue_queue_duration_seconds",
                              "How long in seconds an item stays in workqueue before being requested",
                              ["name", "controller"], buckets=_WORKQUEUE_BUCKETS)
WORKQUEUE_WORK_DURATION = Histogram("workqueue_work_duration_seconds",
                                    "How long in seconds processing an item from workqueue takes.",
                                    ["name", "controller"], buckets=_WORKQUEUE_BUCKETS)
WORKQUEUE_UNFINISHED = Gauge(
    "workqueue_unfinished_work_seconds", "How many seconds of work has been done that is in progress and hasn't "
    "been observed by work_duration. Large values indicate stuck threads. One can deduce the number of stuck "
    "threads by observing the rate at which this increases.", ["name", "controller"])
WORKQUEUE_LONGEST = Gauge("workqueue_longest_running_processor_seconds",
                          "How many seconds has the longest running processor for workqueue been running.",
                          ["name", "controller"])
WORKQUEUE_RETRIES = Counter("workqueue_retries_total", "Total number of retries handled by workqueue",
                            ["name", "controller"])
REST_CLIENT_REQUESTS = Counter("rest_client_requests_total",
                               "Number of HTTP requests, partitioned by status code, method, and host.",
                               ["code", "method", "host"])


def controller_name(gvk: Any) -> str:
    """What the Go ansible-operator names a kind's controller (and its workqueue): widget-v1alpha1-controller."""
    return f"{gvk.kind.lower()}-{gvk.version.lower()}-controller"


def init_controller(name: str, workers: int) -> None:
    """A controller's series at zero from the start, as controller-runtime's initMetrics makes them."""
    for result in _CONTROLLER_RESULTS:
        RECONCILE_TOTAL.labels(name, result)
    for counter in (RECONCILE_ERRORS, TERMINAL_RECONCILE_ERRORS, RECONCILE_PANICS):
        counter.labels(name)
    MAX_CONCURRENT_RECONCILES.labels(name).set(workers)
    ACTIVE_WORKERS.labels(name).set(0)


# controller-runtime's (client-go's leader election metrics provider), same name, help and label.
LEADER = Gauge(
    "leader_election_master_status",
    "Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, 1 indicates master. "
    "'name' is the string used to identify the lease. Please make sure to group by name.", ["name"])


# What each watched object's status says, as kube-state-metrics shows Kubernetes' own kinds: any operator on
# this runtime gets them without a task in its roles. One series per object at a time (the old phase's, or a
# condition's old status or reason, is removed), and all of them go with the object.
RESOURCE_PHASE = Gauge(
    "playbook_operator_resource_phase", "1 for the phase in a watched object's status.phase",
    ["group", "kind", "namespace", "name", "phase"])
RESOURCE_CONDITION = Gauge(
    "playbook_operator_resource_condition", "1 for each condition in a watched object's status, with its status and reason",
    ["group", "kind", "namespace", "name", "type", "status", "reason"])

# (group, kind, namespace, name): the object a series describes.
Owner = tuple[str, str, str, str]


def owner_of(gvk: Any, key: tuple[str, str]) -> Owner:
    """The owner of the series about the object ``key`` (namespace, name) of the watched kind ``gvk``."""
    return (gvk.group, gvk.kind, *key)


class UserMetricError(ValueError):
    pass


_user_metrics: dict[str, Any] = {}
_lock = threading.Lock()
# The labelled series each object's runs recorded, removed when the object goes.
_owned: dict[Owner, set[tuple[str, tuple[str, ...]]]] = {}
_resource_series: dict[Owner, set[tuple[Any, tuple[str, ...]]]] = {}


def _kind_of(metric: Any) -> str:
    return {Counter: "counter", Gauge: "gauge", Histogram: "histogram", Summary: "summary"}[type(metric)]


def _labels_of(payload: dict[str, Any]) -> dict[str, str]:
    labels = payload.get("labels") or {}
    if not isinstance(labels, dict):
        raise UserMetricError("labels must be a mapping of label names to values")
    bad = [k for k in labels if not isinstance(k, str) or not k or k.startswith("__")
           or not all(c.isalnum() or c == "_" for c in k) or k[0].isdigit()]
    if bad:
        raise UserMetricError(f"invalid label name(s) {bad}: letters, digits and _, not starting with a digit or __")
    return {k: "" if v is None else str(v) for k, v in labels.items()}


def record_user_metric(payload: dict[str, Any], owner: Owner | None = None) -> None:
    """Applies one osdk_metric payload, with the Go ansible-operator's rules (one metric type per call;
    a name keeps its type; counters never decrease). ``labels`` is ours (the Go module has none): a name
    keeps its label names too, and the labelled series of ``owner``'s runs go when it does."""
    name, description = payload.get("name"), payload.get("description") or ""
    labels = _labels_of(payload)
    kinds = [k for k in ("counter", "gauge", "histogram", "summary") if isinstance(payload.get(k), dict)]
    if not name:
        raise UserMetricError("a metric needs a name")
    if len(kinds) != 1:
        raise UserMetricError("a request should contain at least one metric" if not kinds
                              else "only one metric can be processed at a time")
    kind, spec = kinds[0], payload[kinds[0]]
    with _lock:
        metric = _user_metrics.get(name)
        if metric is None:
            cls = {"counter": Counter, "gauge": Gauge, "histogram": Histogram, "summary": Summary}[kind]
            metric = cls(name, description, sorted(labels))
            _user_metrics[name] = metric
        elif _kind_of(metric) != kind:
            raise UserMetricError(f"cannot change metric type of {name}, which is a {_kind_of(metric)}")
        names = tuple(metric._labelnames)
        if names != tuple(sorted(labels)):
            raise UserMetricError(f"metric {name} has labels {list(names) or 'none'}; this call gives "
                                  f"{sorted(labels) or 'none'}: every call for a metric names the same labels")
        if labels:
            values = tuple(labels[k] for k in names)
            metric = metric.labels(*values)
            if owner is not None:
                _owned.setdefault(owner, set()).add((name, values))
    if kind == "counter":
        if spec.get("increment"):
            metric.inc()
        elif spec.get("add"):
            if float(spec["add"]) < 0:
                raise UserMetricError("counter metrics cannot decrease in value")
            metric.inc(float(spec["add"]))
    elif kind == "gauge":
        if spec.get("increment"):
            metric.inc()
        elif spec.get("decrement"):
            metric.dec()
        elif spec.get("add"):
            metric.inc(float(spec["add"]))
        elif spec.get("subtract"):
            metric.dec(float(spec["subtract"]))
        elif spec.get("set") is not None:
            metric.set(float(spec["set"]))
        elif spec.get("set_to_current_time"):
            metric.set_to_current_time()
    elif spec.get("observe") is not None:
        metric.observe(float(spec["observe"]))


def observe_resource(owner: Owner, obj: dict[str, Any]) -> None:
    """The series for what ``obj``'s status says now (called on every watch event of the object)."""
    status = obj.get("status") if isinstance(obj.get("status"), dict) else {}
    new: set[tuple[Any, tuple[str, ...]]] = set()
    if isinstance(status.get("phase"), str) and status["phase"]:
        new.add((RESOURCE_PHASE, (*owner, status["phase"])))
    for c in status.get("conditions") or []:
        if isinstance(c, dict) and c.get("type"):
            new.add((RESOURCE_CONDITION, (*owner, str(c["type"]), str(c.get("status") or ""), str(c.get("reason") or ""))))
    with _lock:
        old = _resource_series.get(owner, set())
        for gauge, values in old - new:
            gauge.remove(*values)
        for gauge, values in new - old:
            gauge.labels(*values).set(1)
        _resource_series[owner] = new


def forget_resource(owner: Owner) -> None:
    """The object is gone: so are the series about it, its status's and those its runs recorded."""
    with _lock:
        for gauge, values in _resource_series.pop(owner, set()):
            gauge.remove(*values)
        for name, values in _owned.pop(owner, set()):
            metric = _user_metrics.get(name)
            if metric is not None:
                try:
                    metric.remove(*values)
                except KeyError:
                    pass


def registry() -> Any:
    return REGISTRY
