"""Jinja tests for the SampleDB roles."""

from __future__ import annotations


def sampledb_ready(pod):
    """A server that can serve: Running, Ready, and not being deleted."""
    if not isinstance(pod, dict) or (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    status = pod.get("status") or {}
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
    return status.get("phase") == "Running" and ready


class TestModule:
    def tests(self):
        return {"sampledb_ready": sampledb_ready}
