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


class UserMetricError(ValueError):
    pass


_user_metrics: dict[str, Any] = {}
_user_lock = threading.Lock()


def _kind_of(metric: Any) -> str:
    return {Counter: "counter", Gauge: "gauge", Histogram: "histogram", Summary: "summary"}[type(metric)]


def record_user_metric(payload: dict[str, Any]) -> None:
    """Applies one osdk_metric payload, with the Go ansible-operator's rules (one metric type per call;
    a name keeps its type; counters never decrease)."""
    name, description = payload.get("name"), payload.get("description") or ""
    kinds = [k for k in ("counter", "gauge", "histogram", "summary") if isinstance(payload.get(k), dict)]
    if not name:
        raise UserMetricError("a metric needs a name")
    if len(kinds) != 1:
        raise UserMetricError("a request should contain at least one metric" if not kinds
                              else "only one metric can be processed at a time")
    kind, spec = kinds[0], payload[kinds[0]]
    with _user_lock:
        metric = _user_metrics.get(name)
        if metric is None:
            cls = {"counter": Counter, "gauge": Gauge, "histogram": Histogram, "summary": Summary}[kind]
            metric = cls(name, description)
            _user_metrics[name] = metric
        elif _kind_of(metric) != kind:
            raise UserMetricError(f"cannot change metric type of {name}, which is a {_kind_of(metric)}")
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


def registry() -> Any:
    return REGISTRY
