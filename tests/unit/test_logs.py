"""Log lines: JSON for pipelines, with the object and run id as fields."""

from __future__ import annotations

import json
import logging

from runner.logs import JsonFormatter


def test_json_lines_carry_object_and_ident() -> None:
    record = logging.LogRecord("playbook_operator.reconcile", logging.INFO, __file__, 1, "run end: %s", ("ok",), None)
    record.object = "Widget ns/w"
    record.ident = "20261122T000000-abc123"
    out = json.loads(JsonFormatter().format(record))
    assert out["level"] == "info" and out["msg"] == "run end: ok"
    assert out["object"] == "Widget ns/w" and out["ident"] == "20261122T000000-abc123"
    assert out["ts"].endswith("Z")
