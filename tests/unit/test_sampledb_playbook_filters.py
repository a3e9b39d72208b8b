"""The playbook's own filters (playbooks/filter_plugins/sampledb_playbook.py): what a failed step says in status."""

from __future__ import annotations

from tests.plugins import plugin

filters = plugin("playbooks/filter_plugins/sampledb_playbook.py")


def test_a_failure_in_status_is_one_line_and_never_a_template_again() -> None:
    """Ansible's error quotes the template that failed; in status, read back by the next run as the object's data,
    it must not be templated again (it failed for minutes, each run quoting the last)."""
    quoted = ("An unhandled exception occurred while templating '{{ x | sampledb_job_state(sdb.metadata.uid) }}'.\n"
              " {% if y %}")
    text = filters.sampledb_failure_message({"msg": quoted})
    assert "{{" not in text and "}}" not in text and "{%" not in text and "%}" not in text
    assert "sampledb_job_state(sdb.metadata.uid)" in text and "\n" not in text


def test_what_a_failed_task_said() -> None:
    assert filters.sampledb_failure_message({"censored": "x", "msg": "secret"}) == "the task's output is hidden (no_log)"
    items = {"results": [{"failed": True, "msg": "a"}, {"failed": True, "msg": "a"}, {"failed": False, "msg": "b"}]}
    assert filters.sampledb_failure_message(items) == "a"
    body = '{"kind":"Status","message":"spec.replicas: Invalid value: -1","reason":"Invalid"}'
    assert filters.sampledb_failure_message({"msg": "Failed to patch", "body": body}) == \
        "Failed to patch: spec.replicas: Invalid value: -1"
    assert filters.sampledb_failure_message({"msg": "x" * 2000}, limit=10) == "x" * 9 + "…"
