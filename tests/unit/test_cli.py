"""`playbook-operator run` flags: the ansible-operator's names and defaults, in one RunConfig."""

from __future__ import annotations

import pytest

from runner.cli import config_from_args, run_parser


def test_defaults_follow_the_ansible_operator(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WATCH_NAMESPACE", raising=False)
    cfg = config_from_args(run_parser().parse_args([]))
    assert str(cfg.watches_file) == "watches.yaml" and cfg.inject_owner_ref is True
    assert cfg.ansible_verbosity == 2 and cfg.reconcile_period == 10 * 3600
    assert (cfg.lease_duration, cfg.renew_deadline, cfg.retry_period) == (15, 10, 2)
    assert cfg.graceful_shutdown_timeout == 30 and cfg.ansible_log_events == "Tasks"
    assert cfg.health_probe_bind_address == ":6789" and not cfg.leader_elect and cfg.watch_namespaces == ()


def test_flags_and_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WATCH_NAMESPACE", "team-a, team-b")
    cfg = config_from_args(run_parser().parse_args([
        "--watches-file", "/etc/op/watches.yaml", "--inject-owner-ref=false", "--reconcile-period", "1m30s",
        "--max-concurrent-reconciles", "4", "--leader-elect", "--leader-election-id", "lock",
        "--zap-log-level", "debug", "--zap-encoder", "console", "--ansible-args", "--skip-tags slow",
        "--executor", "cold"]))
    assert str(cfg.watches_file) == "/etc/op/watches.yaml" and cfg.inject_owner_ref is False
    assert cfg.reconcile_period == 90 and cfg.max_concurrent_reconciles == 4
    assert cfg.leader_elect and cfg.leader_election_id == "lock"
    assert (cfg.log_level, cfg.log_format) == ("debug", "text")
    assert cfg.ansible_args == "--skip-tags slow" and cfg.executor == "cold"
    assert cfg.watch_namespaces == ("team-a", "team-b")


def test_bad_duration_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        run_parser().parse_args(["--reconcile-period", "ten minutes"])
    assert "'ten minutes' is not a duration" in capsys.readouterr().err
