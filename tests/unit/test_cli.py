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
    assert cfg.metrics_bind_address == ":8443" and not cfg.metrics_secure and not cfg.metrics_require_rbac


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


def test_the_go_operators_spellings_and_the_scaffolded_manager_arguments(monkeypatch: pytest.MonkeyPatch) -> None:
    # config/default + config/manager of a project scaffolded by operator-sdk v1.42 (the advanced molecule
    # sample's, tests/compat), its --ansible-args quoted in YAML as the scaffold quotes it
    monkeypatch.delenv("WATCH_NAMESPACE", raising=False)
    cfg = config_from_args(run_parser().parse_args([
        "--watches-file=./watches.yaml", "--metrics-require-rbac", "--metrics-secure", "--metrics-bind-address=:8443",
        "--leader-elect", "--leader-election-id=advanced-molecule-operator",
        "--ansible-args='--vault-password-file /opt/ansible/pwd.yml'", "--health-probe-bind-address=:6789"]))
    assert cfg.metrics_secure and cfg.metrics_require_rbac and cfg.leader_elect
    assert cfg.ansible_args == "--vault-password-file /opt/ansible/pwd.yml"  # two arguments for ansible-playbook
    cfg = config_from_args(run_parser().parse_args([
        "--metrics-addr=:9090", "--enable-leader-election", "--leader-elect-lease-duration=20s",
        "--leader-elect-renew-deadline=12s", "--leader-elect-resource-lock=leases", "--ansible-log-events=tasks",
        "--proxy-port=8888", "--enable-http2=false", "--metrics-secure=false"]))
    assert cfg.metrics_bind_address == ":9090" and cfg.leader_elect and not cfg.metrics_secure
    assert (cfg.lease_duration, cfg.renew_deadline) == (20, 12)
    assert cfg.ansible_log_events == "Tasks" and cfg.proxy_port == 8888


def test_durations_are_validated_once_at_start_up(monkeypatch: pytest.MonkeyPatch) -> None:
    from runner.cli import check_flags

    def check(*argv: str) -> tuple[list[str], list[str]]:
        return check_flags(config_from_args(run_parser().parse_args(list(argv))))

    assert check() == ([], [])
    errors, warnings = check("--reconcile-period=-5m")
    assert not errors and warnings == ["--reconcile-period -300s is negative: no periodic reconcile"]
    assert check("--retry-backoff-base", "0s")[0] == [
        "--retry-backoff-base must be positive: failures would be retried back to back"]
    assert check("--retry-backoff-base", "10s", "--retry-backoff-max", "1s")[0]
    assert check("--leader-election-lease-duration", "5s", "--leader-election-renew-deadline", "10s")[0]
    assert check("--leader-election-retry-period=-1s")[0]
    assert check("--max-concurrent-reconciles=-2")[0]


def test_refused_durations_stop_start_up(capsys: pytest.CaptureFixture[str]) -> None:
    from runner.cli import run

    with pytest.raises(SystemExit) as exc:
        run(["--retry-backoff-base=-1s"])
    assert exc.value.code == 2 and "--retry-backoff-base must be positive" in capsys.readouterr().err


def test_the_default_concurrency_respects_the_containers_cpu_limit(tmp_path) -> None:
    """resources.limits.cpu: 500m on a node of many CPUs is 1 run at once per kind by default, not one per CPU."""
    import os

    from runner.cli import available_cpus

    cpus = len(os.sched_getaffinity(0))
    proc = tmp_path / "cgroup"
    proc.write_text("0::/kubepods/pod1/c1\n")
    pod = tmp_path / "fs" / "kubepods" / "pod1"
    (pod / "c1").mkdir(parents=True)
    (pod / "c1" / "cpu.max").write_text("max 100000\n")
    assert available_cpus(tmp_path / "fs", proc) == cpus  # no limit
    (pod / "cpu.max").write_text("50000 100000\n")  # the pod's limit, one level up
    assert cpus > 1 and available_cpus(tmp_path / "fs", proc) == 1
    v1 = tmp_path / "v1"
    (v1 / "cpu").mkdir(parents=True)
    (v1 / "cpu" / "cpu.cfs_quota_us").write_text("50000\n")
    (v1 / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    assert available_cpus(v1, tmp_path / "none") == 1


def test_metrics_tokens_are_never_asked_for_in_clear_text() -> None:
    from runner.cli import check_flags

    cfg = config_from_args(run_parser().parse_args(["--metrics-require-rbac"]))
    assert check_flags(cfg)[0] == ["--metrics-secure flag is required when --metrics-require-rbac is present"]
    cfg = config_from_args(run_parser().parse_args(["--metrics-require-rbac", "--metrics-secure"]))
    assert check_flags(cfg)[0] == []


def test_templated_specs_are_pointed_out_at_start_up() -> None:
    from runner.cli import check_flags
    from runner.config import GVK, Watch

    cfg = config_from_args(run_parser().parse_args([]))
    watches = [Watch(GVK("g", "v1", "Open")), Watch(GVK("g", "v1", "Closed"), mark_unsafe=True)]
    (warning,) = check_flags(cfg, watches)[1]
    assert warning.startswith("markUnsafe is false for g/v1, Kind=Open: ") and "Closed" not in warning
