"""The servers' Lease agent (roles/provision/files/lease-agent.py): what it leaves for entrypoint.sh."""

from __future__ import annotations

import http.client
import ssl
import urllib.request
from pathlib import Path

import pytest

from tests.plugins import plugin

agent = plugin("roles/provision/files/lease-agent.py")


def test_each_read_leaves_the_holder_and_when_it_was_sent_and_a_failure_leaves_the_last_good_read(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "sampledb-lease"
    error = tmp_path / "sampledb-lease-error"
    assert agent.read_once(out, lambda: "db-0", "") == ""
    holder, sent = out.read_text().split()
    assert holder == "db-0" and abs(float(sent) - agent.uptime()) < 1 and len(sent.split(".")[1]) == 2
    good = out.read_text()

    def cut_off() -> str:  # (not an OSError: a response cut short while the API server restarts)
        raise http.client.IncompleteRead(b"")
    failing = agent.read_once(out, cut_off, "")
    assert failing.startswith("IncompleteRead") and out.read_text() == good
    assert error.read_text().startswith("IncompleteRead")
    assert agent.read_once(out, cut_off, failing) == failing  # said once, not every second
    assert capsys.readouterr().err.count("cannot read the Lease") == 1
    # a Lease that names nobody (a change of primary under way)
    assert agent.read_once(out, lambda: "", failing) == ""
    assert out.read_text().split()[0] == "-" and not error.exists()
    assert "can be read again" in capsys.readouterr().err


def test_it_reaches_the_api_server_directly_never_through_a_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.invalid:3128")
    def proxied(opener: urllib.request.OpenerDirector) -> bool:
        return any(isinstance(h, urllib.request.ProxyHandler) for h in opener.handlers)
    assert proxied(urllib.request.build_opener())  # (what urllib does by default with HTTPS_PROXY set)
    assert not proxied(agent.opener(ssl.create_default_context()))
