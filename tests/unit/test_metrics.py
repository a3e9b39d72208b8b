"""What /metrics says about watched objects and the series their roles record (osdk_metric)."""

from __future__ import annotations

import uuid

import pytest
from prometheus_client import REGISTRY, generate_latest

from runner import metrics

OWNER = ("sampledb.example.com", "SampleDB", "ns1", "db")


def exposition() -> str:
    return generate_latest(REGISTRY).decode()


def test_status_phase_and_conditions_follow_the_object_and_go_with_it() -> None:
    owner = ("example.com", "Widget", "ns", f"w-{uuid.uuid4().hex[:6]}")
    name = owner[3]
    metrics.observe_resource(owner, {"status": {"phase": "Provisioning", "conditions": [
        {"type": "Ready", "status": "False", "reason": "Initializing"}]}})
    text = exposition()
    assert f'playbook_operator_resource_phase{{group="example.com",kind="Widget",name="{name}",namespace="ns",phase="Provisioning"}} 1.0' in text
    assert f'name="{name}",namespace="ns",reason="Initializing",status="False",type="Ready"}} 1.0' in text

    metrics.observe_resource(owner, {"status": {"phase": "Ready", "conditions": [
        {"type": "Ready", "status": "True", "reason": "Serving"}]}})
    text = exposition()
    assert f'name="{name}",namespace="ns",phase="Ready"}} 1.0' in text
    assert "Provisioning" not in "".join(line for line in text.splitlines() if name in line)
    assert "Initializing" not in "".join(line for line in text.splitlines() if name in line)

    metrics.forget_resource(owner)
    assert name not in exposition()


def test_labelled_user_metrics_belong_to_the_object_whose_run_recorded_them() -> None:
    metric = f"test_failovers_{uuid.uuid4().hex[:6]}_total"
    a = ("sampledb.example.com", "SampleDB", "ns1", "a")
    b = ("sampledb.example.com", "SampleDB", "ns1", "b")
    for owner in (a, b, a):
        metrics.record_user_metric({"name": metric, "description": "d", "labels": {"sampledb": owner[3]},
                                    "counter": {"increment": True}}, owner=owner)
    text = exposition()
    assert f'{metric}{{sampledb="a"}} 2.0' in text and f'{metric}{{sampledb="b"}} 1.0' in text
    metrics.forget_resource(a)
    text = exposition()
    assert f'{metric}{{sampledb="a"}}' not in text and f'{metric}{{sampledb="b"}} 1.0' in text


def test_a_metric_keeps_its_label_names() -> None:
    metric = f"test_backup_time_{uuid.uuid4().hex[:6]}"
    metrics.record_user_metric({"name": metric, "description": "d", "labels": {"sampledb": "x"},
                                "gauge": {"set": 5}}, owner=OWNER)
    with pytest.raises(metrics.UserMetricError, match=r"has labels \['sampledb'\]; this call gives none"):
        metrics.record_user_metric({"name": metric, "description": "d", "gauge": {"set": 5}})
    with pytest.raises(metrics.UserMetricError, match="invalid label name"):
        metrics.record_user_metric({"name": metric, "description": "d", "labels": {"__x": "1"}, "gauge": {"set": 1}})


def test_unlabelled_metrics_behave_as_upstream() -> None:
    metric = f"test_plain_{uuid.uuid4().hex[:6]}"
    metrics.record_user_metric({"name": metric, "description": "d", "gauge": {"set": 3}}, owner=OWNER)
    metrics.forget_resource(OWNER)  # an unlabelled series is the operator's, not the object's
    assert f"{metric} 3.0" in exposition()
    with pytest.raises(metrics.UserMetricError, match="cannot change metric type"):
        metrics.record_user_metric({"name": metric, "description": "d", "counter": {"increment": True}})
