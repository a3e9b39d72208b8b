"""Jinja filters of playbooks/sampledb.yml itself (the roles' own are in their filter_plugins)."""

from __future__ import annotations

import re


def sampledb_failure_message(result, limit=1000):
    """What a failed task said, in one line for status and Events: its msg, or its failed items' own, or the API's
    reason (a 422's message names the field)."""
    result = result or {}
    if result.get("censored"):
        return "the task's output is hidden (no_log)"
    items = [r.get("msg") for r in result.get("results") or [] if isinstance(r, dict) and r.get("failed") and r.get("msg")]
    text = "; ".join(dict.fromkeys(str(m) for m in items)) if items else str(result.get("msg") or "failed")
    body = result.get("error", {}) if isinstance(result.get("error"), dict) else {}
    reason = (result.get("reason") or body.get("reason") or "")
    detail = ""
    if isinstance(result.get("body"), str):
        match = re.search(r'"message":\s*"((?:[^"\\]|\\.)*)"', result["body"])
        detail = match.group(1).encode().decode("unicode_escape") if match else ""
    if detail and detail not in text:
        text = f"{text}: {detail}"
    elif reason and reason not in text:
        text = f"{text} ({reason})"
    # Ansible's errors quote the template that failed; written into status as is, it would be a template again
    text = " ".join(text.split()).replace("{{", "{ {").replace("}}", "} }").replace("{%", "{ %").replace("%}", "% }")
    return text if len(text) <= limit else text[: limit - 1] + "…"


class FilterModule:
    def filters(self):
        return {"sampledb_failure_message": sampledb_failure_message}
