"""The runtime's own list-and-watch of the kinds in watches.yaml: served once their CRD exists, quiet about
what the API server says while it starts, alive through refusals, unhurt by events of any size."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator

import pytest

from tests.apiproxy import ApiProxy, Fault
from tests.kube import Kube, ServiceAccountAccess, wait_for
from tests.operator import OPERATOR_BASICS, FreshKind, Widgets, fresh_kind, kind_rules, widget_watch


@pytest.fixture
def kind(kube: Kube) -> Iterator[FreshKind]:
    """A namespaced kind of its own group; its CRD is installed by the test, and removed afterwards."""
    fresh = fresh_kind()
    yield fresh
    fresh.uninstall(kube)


def errors(log: str) -> list[str]:
    return [line for line in log.splitlines() if re.search(r"\bERROR\b", line)]


def test_a_kind_whose_crd_comes_later_is_served_and_readiness_waits_for_it(
        kube: Kube, namespace: str, kind: FreshKind, service_account: ServiceAccountAccess, start_operator) -> None:
    """As the Go operator's scaffolded RBAC runs it: no access to CRDs, so nothing to learn of a new one from."""
    service_account.grant("basics", OPERATOR_BASICS)
    service_account.grant("kind", kind_rules(kind.group))
    op = start_operator([kind.watch()], env=service_account.env(), wait=False)
    op.wait_for_log("serving health probes on")
    time.sleep(5)
    assert op.http_get("/readyz")[0] == 503  # not ready: a kind it must serve is not served yet
    kind.install(kube)
    gizmos = kind.objects(kube, namespace)
    gizmos.create("late", {"message": "after the CRD"})
    gizmos.wait_successful("late", timeout=90)
    assert kube.core.read_namespaced_config_map("late-cm", namespace).data["message"] == "after the CRD"
    wait_for("/readyz to say ready", lambda: op.http_get("/readyz")[0] == 200, timeout=30)
    assert not errors(op.logs())


def test_a_clean_start_on_a_fresh_crd_logs_no_error(kube: Kube, namespace: str, kind: FreshKind, api_proxy: ApiProxy,
                                                    start_operator) -> None:
    """`make run` on a new cluster: the CRD just installed, the operator started at once. The API server
    answers 429 (storage is initializing) for a moment: retried quietly, not an ERROR."""
    kind.install(kube)
    api_proxy.inject(Fault("GET", rf"/{kind.plural}\?", 429, "storage is (re)initializing", "TooManyRequests",
                           times=3, headers={"Retry-After": "1"}))
    op = start_operator([kind.watch()], env=api_proxy.env())
    gizmos = kind.objects(kube, namespace)
    gizmos.create("first", {})
    gizmos.wait_successful("first")
    assert [r for r in api_proxy.seen() if r.status == 429]  # the answer the operator had to take
    assert not errors(op.logs()), errors(op.logs())


def test_the_operator_outlives_a_watch_it_may_not_make_yet(kube: Kube, namespace: str, kind: FreshKind,
                                                          service_account: ServiceAccountAccess,
                                                          start_operator) -> None:
    """RBAC missing for a while (a Helm upgrade in progress): the watch is retried as long as it takes, as
    client-go's reflector retries, and says why."""
    kind.install(kube)
    service_account.grant("basics", OPERATOR_BASICS)
    op = start_operator([kind.watch()], env=service_account.env(), wait=False)
    op.wait_for_log("serving health probes on")
    time.sleep(30)
    assert op.proc is not None and op.proc.poll() is None, op.logs()[-3000:]
    assert re.search(r"WARNING .*Gizmo.*(forbidden|Forbidden|403)", op.logs()), op.logs()[-3000:]
    service_account.grant("kind", kind_rules(kind.group))
    gizmos = kind.objects(kube, namespace)
    gizmos.create("allowed", {})
    gizmos.wait_successful("allowed", timeout=90)


def test_oversized_watch_events_do_not_wedge_a_watch(kube: Kube, namespace: str, widgets: Widgets,
                                                     start_operator) -> None:
    """A watch event is one line of JSON with no limit of its own: a dependent whose metadata alone is
    hundreds of KB (its managedFields list every key), and a CR with a big spec."""
    op = start_operator([widget_watch(reconcilePeriod="1h")])
    widgets.create("w", {"message": "one"})
    widgets.wait_successful("w")
    op.wait_for_log("watching v1, Kind=ConfigMap as a dependent kind")
    keys = {f"key-{i:06d}": "" for i in range(40000)}
    kube.core.patch_namespaced_config_map("w-cm", namespace, {"data": keys})
    wait_for("the owner's run for its ConfigMap's change", lambda: len(op.runs("w")) >= 2, timeout=60)
    kube.core.delete_namespaced_config_map("w-cm", namespace)
    wait_for("the ConfigMap to come back", lambda: kube.core.read_namespaced_config_map("w-cm", namespace),
             timeout=60)
    widgets.create("big", {"message": "big", "blob": "x" * 700_000})
    widgets.wait_successful("big", timeout=90)
