"""What a CR's author or a role can ask of the runtime, bounded: periods that are not positive, runs that
never end, output a reader cannot decode, names at the limit."""

from __future__ import annotations

import time

from tests.operator import Widgets, widget_watch

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
