"""The common SampleDB filters (roles/common/filter_plugins/sampledb.py) that feed metrics."""

from __future__ import annotations

import importlib.util
from pathlib import Path

_PATH = Path(__file__).resolve().parents[2] / "roles" / "common" / "filter_plugins" / "sampledb.py"
_spec = importlib.util.spec_from_file_location("sampledb_common_filters", _PATH)
filters = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(filters)


def backup(phase: str, completed: str | None = None) -> dict:
    status = {"phase": phase}
    if completed:
        status["completedAt"] = completed
    return {"metadata": {"name": "b"}, "status": status}


def test_the_newest_completed_backup_and_the_last_scheduled_start() -> None:
    records = [backup("Completed", "2026-11-24T10:00:00Z"), backup("Completed", "2026-11-24T11:00:00Z"),
               backup("Failed"), backup("Running"), {"metadata": {"name": "new"}}]
    times = filters.sampledb_backup_times(records, "2026-11-24T12:00:00Z")
    assert times["last_success"] == int(filters.datetime(2026, 11, 24, 11, tzinfo=filters.UTC).timestamp())
    assert times["last_scheduled"] - times["last_success"] == 3600  # the 12:00 backup has not completed


def test_never_is_zero() -> None:
    assert filters.sampledb_backup_times([], None) == {"last_success": 0, "last_scheduled": 0}
    assert filters.sampledb_backup_times([backup("Failed")], "") == {"last_success": 0, "last_scheduled": 0}


def test_the_object_of_a_kind_as_applied() -> None:
    one = {"changed": False, "result": {"kind": "CronJob", "status": {"lastScheduleTime": "2026-11-24T12:00:00Z"}}}
    several = {"changed": False, "result": {"results": [
        {"changed": False, "method": "apply", "result": {"kind": "PersistentVolumeClaim"}},
        {"changed": True, "method": "apply", "result": {"kind": "CronJob", "spec": {"suspend": True}}}]}}
    assert filters.sampledb_applied(one, "CronJob") == one["result"]
    assert filters.sampledb_applied(several, "CronJob") == {"kind": "CronJob", "spec": {"suspend": True}}
    assert filters.sampledb_applied(several, "StatefulSet") == {}
    assert filters.sampledb_applied({"skipped": True}, "CronJob") == {}
