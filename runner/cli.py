"""The `playbook-operator` command: `run` (the operator, with the ansible-operator's flags) and `cluster`
(the local control plane for development and tests)."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import math
import os
import sys
from pathlib import Path

from . import __version__
from .config import ConfigError, RunConfig, Watch, load_watches, parse_duration


def _duration(text: str) -> float:
    try:
        return parse_duration(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration (e.g. 30s, 5m, 10h)") from None


def _bool(text: str) -> bool:
    if text.lower() in ("true", "1", "yes"):
        return True
    if text.lower() in ("false", "0", "no"):
        return False
    raise argparse.ArgumentTypeError(f"{text!r} is not true or false")


def _ansible_args(text: str) -> str:
    # The Go ansible-operator drops one pair of single quotes around the whole value, so that a manifest's
    # `--ansible-args='--vault-password-file /opt/ansible/pwd.yml'` (quotes and all in YAML) passes two
    # arguments on, not one.
    if len(text) >= 2 and text[0] == "'" and text[-1] == "'":
        return text[1:-1]
    return text


def run_parser() -> argparse.ArgumentParser:
    d = RunConfig()
    p = argparse.ArgumentParser(prog="playbook-operator run",
                                description="Run the operator: watch the kinds in watches.yaml and run their roles.")
    a = p.add_argument
    a("--watches-file", default=os.environ.get("WATCHES_FILE", str(d.watches_file)),
      help="path to watches.yaml (default: %(default)s)")
    a("--inject-owner-ref", type=_bool, nargs="?", const=True, default=d.inject_owner_ref,
      help="add an ownerReference to the CR on objects roles create (default: %(default)s)")
    a("--ansible-verbosity", type=int, default=d.ansible_verbosity, help="ansible -v level 0-7 (default: %(default)s)")
    a("--ansible-roles-path", default=None, help="ANSIBLE_ROLES_PATH for the runs")
    a("--ansible-collections-path", default=None, help="ANSIBLE_COLLECTIONS_PATH for the runs")
    a("--ansible-args", default="", type=_ansible_args,
      help="extra arguments for ansible-playbook, e.g. '--skip-tags slow'")
    a("--reconcile-period", type=_duration, default=d.reconcile_period,
      help="resync period when watches.yaml sets none (default: 10h)")
    a("--max-concurrent-reconciles", type=int, default=None,
      help="runs at once per kind (default: the CPUs available, within the container's CPU limit)")
    a("--max-concurrent-runs", type=int, default=0,
      help="runs at once across all kinds (default: the sum of the per-kind limits)")
    a("--metrics-bind-address", "--metrics-addr", dest="metrics_bind_address", default=d.metrics_bind_address,
      help="'0' disables (default: %(default)s)")
    a("--metrics-secure", type=_bool, nargs="?", const=True, default=d.metrics_secure,
      help="serve /metrics over HTTPS, with a self-signed certificate as controller-runtime makes one")
    a("--metrics-require-rbac", type=_bool, nargs="?", const=True, default=d.metrics_require_rbac,
      help="serve /metrics only to bearer tokens allowed to GET it (TokenReview and SubjectAccessReview)")
    a("--enable-http2", type=_bool, nargs="?", const=True, default=False,
      help="accepted for the Go ansible-operator's sake; the endpoints speak HTTP/1.1 (its default too)")
    a("--health-probe-bind-address", default=d.health_probe_bind_address, help="(default: %(default)s)")
    a("--leader-elect", "--enable-leader-election", dest="leader_elect", type=_bool, nargs="?", const=True,
      default=False, help="elect one active replica")
    a("--leader-election-id", default="", help="name of the Lease (default: playbook-operator-lock)")
    a("--leader-election-namespace", default="", help="namespace of the Lease (default: the pod's)")
    a("--leader-elect-lease-duration", "--leader-election-lease-duration", type=_duration, default=d.lease_duration,
      dest="lease_duration")
    a("--leader-elect-renew-deadline", "--leader-election-renew-deadline", type=_duration, default=d.renew_deadline,
      dest="renew_deadline")
    # Deprecated in the Go ansible-operator, where it is now always Leases, as here.
    a("--leader-elect-resource-lock", default="leases", help=argparse.SUPPRESS)
    a("--leader-election-retry-period", type=_duration, default=d.retry_period, dest="retry_period")
    a("--graceful-shutdown-timeout", type=_duration, default=d.graceful_shutdown_timeout,
      help="how long runs may finish after SIGTERM (default: 30s)")
    a("--ansible-log-events", type=str.capitalize, choices=("Tasks", "Everything", "Nothing"),
      default=d.ansible_log_events, help="Tasks, Everything or Nothing, any case (default: %(default)s)")
    a("--proxy-port", type=int, default=d.proxy_port,
      help="port of the API proxy the runs use, on 127.0.0.1; 0 picks a free one (default: %(default)s)")
    a("--log-level", "--zap-log-level", dest="log_level", default=os.environ.get("LOG_LEVEL", d.log_level),
      help="debug, info, warning, error (default: %(default)s)")
    a("--log-format", "--zap-encoder", dest="log_format", choices=("text", "json", "console"),
      default=d.log_format)
    a("--artifacts-dir", default=os.environ.get("PLAYBOOK_OPERATOR_ARTIFACTS", str(d.artifacts_dir)),
      help="where runner input and artifact directories live (default: %(default)s)")
    a("--executor", choices=("warm", "cold"), default=os.environ.get("PLAYBOOK_OPERATOR_EXECUTOR", d.executor),
      help="warm: forked pre-imported Ansible workers; cold: ansible-runner per run (default: %(default)s)")
    a("--retry-backoff-base", type=_duration, default=d.retry_backoff_base, help="first retry after a failure")
    a("--retry-backoff-max", type=_duration, default=d.retry_backoff_max, help="longest retry delay")
    a("--run-timeout", type=_duration, default=d.run_timeout,
      help="stop a run (its whole process group) that takes longer; 0: no limit (default: 1h). A watch's "
           "runTimeout and an object's playbook-operator.dev/run-timeout annotation take precedence")
    a("--required-permissions", type=Path, default=os.environ.get("REQUIRED_PERMISSIONS") or None,
      help="RBAC manifests (a ClusterRole or Role, or a list of rules) of what the roles do: every verb is asked of "
           "the API server at start-up, and the operator stops naming any that is missing (default: no check)")
    return p


def available_cpus(cgroup_root: Path = Path("/sys/fs/cgroup"), proc_cgroup: Path = Path("/proc/self/cgroup")) -> int:
    """CPUs this process may use: those it may run on, bounded by its cgroup's CPU limit (a container's
    resources.limits.cpu; cgroup v2's cpu.max, along the path from the process's cgroup to the root, or v1's
    CFS quota), rounded up. The Go operator's default (runtime.NumCPU) reads the CPUs only: a container limited
    to 1 CPU on a 64-CPU node would run 64 Ansible runs at once per kind."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    limits = []
    try:
        lines = proc_cgroup.read_text().splitlines()
    except OSError:
        lines = []
    v2 = next((line.split(":", 2)[2] for line in lines if line.startswith("0::")), None)
    candidates: list[tuple[Path, Path | None]] = []
    if v2 is not None:
        path = Path(v2.strip() or "/")
        for level in [path, *path.parents]:
            candidates.append((cgroup_root / str(level).lstrip("/") / "cpu.max", None))
    candidates.append((cgroup_root / "cpu.max", None))
    candidates.append((cgroup_root / "cpu" / "cpu.cfs_quota_us", cgroup_root / "cpu" / "cpu.cfs_period_us"))
    for quota_file, period_file in candidates:
        try:
            if period_file is None:
                quota, _, period = quota_file.read_text().strip().partition(" ")
            else:
                quota, period = quota_file.read_text().strip(), period_file.read_text().strip()
        except OSError:
            continue
        if quota not in ("max", "-1") and int(quota) > 0 and int(period or 100000) > 0:
            limits.append(math.ceil(int(quota) / int(period or 100000)))
    return max(1, min([cpus, *limits]))


def go_bool(text: str) -> bool:
    """Go's strconv.ParseBool; anything else is false (the Go operator's default for ANSIBLE_DEBUG_LOGS)."""
    return text.strip() in ("1", "t", "T", "TRUE", "true", "True")


def config_from_args(args: argparse.Namespace) -> RunConfig:
    """Flags (named as RunConfig's fields) plus the environment, in one RunConfig."""
    values = {f.name: getattr(args, f.name) for f in dataclasses.fields(RunConfig) if hasattr(args, f.name)}
    values.update(
        watches_file=Path(args.watches_file),
        artifacts_dir=Path(args.artifacts_dir),
        max_concurrent_reconciles=args.max_concurrent_reconciles or available_cpus(),
        log_format="text" if args.log_format == "console" else args.log_format,
        watch_namespaces=tuple(n.strip() for n in os.environ.get("WATCH_NAMESPACE", "").split(",") if n.strip()),
        ansible_debug_logs=go_bool(os.environ.get("ANSIBLE_DEBUG_LOGS", "false")),
        required_permissions=Path(args.required_permissions) if args.required_permissions else None,
    )
    return RunConfig(**values)


# client-go's leaderelection refuses a renew deadline that the retries' jitter (1.2) could overshoot.
LEASE_JITTER = 1.2


def check_flags(cfg: RunConfig, watches: list[Watch] | None = None) -> tuple[list[str], list[str]]:
    """The flags (durations above all), validated once at start-up: (errors that stop it, warnings). A negative
    reconcile period means no periodic reconcile, as the Go operator takes it; a negative grace period waits for
    runs without a limit, as controller-runtime's does."""
    errors, warnings = [], []
    if cfg.metrics_require_rbac and not cfg.metrics_secure:  # as the Go operator: tokens never in clear text
        errors.append("--metrics-secure flag is required when --metrics-require-rbac is present")
    unsafe = [str(w.gvk) for w in watches or [] if not w.mark_unsafe]
    if unsafe:
        warnings.append(f"markUnsafe is false for {', '.join(unsafe)}: Ansible templates strings of their specs, so "
                        "anyone who may edit such an object runs code as the operator; set markUnsafe: true unless "
                        "the roles expect templates in specs")
    if cfg.reconcile_period < 0:
        warnings.append(f"--reconcile-period {cfg.reconcile_period:g}s is negative: no periodic reconcile")
    if not cfg.retry_backoff_base > 0:
        errors.append("--retry-backoff-base must be positive: failures would be retried back to back")
    elif not cfg.retry_backoff_max >= cfg.retry_backoff_base:
        errors.append("--retry-backoff-max must be at least --retry-backoff-base")
    if not cfg.retry_period > 0:
        errors.append("--leader-election-retry-period must be positive")
    elif not cfg.renew_deadline > LEASE_JITTER * cfg.retry_period:
        errors.append(f"--leader-election-renew-deadline must be more than {LEASE_JITTER} x the retry period")
    elif not cfg.lease_duration > cfg.renew_deadline:
        errors.append("--leader-election-lease-duration must be longer than the renew deadline")
    if cfg.run_timeout < 0:
        errors.append("--run-timeout must be 0 (no limit) or more")
    if cfg.max_concurrent_reconciles < 1 or cfg.max_concurrent_runs < 0:
        errors.append("--max-concurrent-reconciles must be at least 1, --max-concurrent-runs 0 (no cap) or more")
    return errors, warnings


def run(argv: list[str]) -> int:
    parser = run_parser()
    args = parser.parse_args(argv)
    cfg = config_from_args(args)
    errors, _ = check_flags(cfg)
    if errors:
        parser.error("; ".join(errors))
    import faulthandler
    import logging
    import signal

    from . import logs

    logs.setup(cfg.log_level, cfg.log_format)
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # `kill -USR1` prints every thread's stack
    if cfg.ansible_roles_path:
        os.environ["ANSIBLE_ROLES_PATH"] = cfg.ansible_roles_path
    if cfg.ansible_collections_path:
        os.environ["ANSIBLE_COLLECTIONS_PATH"] = cfg.ansible_collections_path
    try:
        watches = load_watches(cfg.watches_file, max_concurrent_reconciles=cfg.max_concurrent_reconciles,
                               ansible_verbosity=cfg.ansible_verbosity)
    except ConfigError as exc:
        print(f"error: invalid watches file: {exc}", file=sys.stderr)
        return 2
    for warning in check_flags(cfg, watches)[1]:
        logging.getLogger("playbook_operator").warning("%s", warning)
    from .manager import Operator

    return asyncio.run(Operator(cfg, watches).run())


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "cluster":
        # The local control plane is development tooling; the runtime itself never imports it.
        from localcluster.cluster import main as cluster_main

        return cluster_main(argv[1:])
    if argv and argv[0] == "run":
        return run(argv[1:])
    if argv and argv[0] in ("--version", "version"):
        print(f"playbook-operator {__version__}")
        return 0
    print("usage: playbook-operator {run,cluster,version} ...\n"
          "  run      run the operator (see `playbook-operator run --help`)\n"
          "  cluster  the local control plane: up, down, status, env", file=sys.stderr)
    return 2
