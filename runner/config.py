"""Configuration: the operator's flags (one ``Config``) and watches.yaml (a list of ``Watch``).

watches.yaml is the Operator SDK ansible-operator's format, field for field. Unlike upstream, every
mistake stops start-up with the file, the entry and the field, and what was expected: unknown keys,
wrong types, bad durations and missing roles are errors here, not silent defaults.
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

log = logging.getLogger(__name__)

DEFAULT_MAX_RUNNER_ARTIFACTS = 20
DEFAULT_RECONCILE_PERIOD = 10 * 3600.0  # upstream's --reconcile-period default (10h)

ANNOTATION_PREFIX = "ansible.sdk.operatorframework.io"
RECONCILE_PERIOD_ANNOTATION = f"{ANNOTATION_PREFIX}/reconcile-period"
MAX_RUNNER_ARTIFACTS_ANNOTATION = f"{ANNOTATION_PREFIX}/max-runner-artifacts"
VERBOSITY_ANNOTATION = f"{ANNOTATION_PREFIX}/verbosity"
# Ours, on an owner: the objects its runs created that garbage collection cannot reach (cluster-scoped, or in
# another namespace), by UID, for the runtime to delete with it.
RECORDED_DEPENDENTS_ANNOTATION = "playbook-operator.dev/dependents"
# Ours: how long one run of the object may take before it is stopped (a duration; 0: no limit).
RUN_TIMEOUT_ANNOTATION = "playbook-operator.dev/run-timeout"
DEFAULT_RUN_TIMEOUT = 3600.0


class ConfigError(Exception):
    """A configuration mistake, phrased so that the reader knows where and how to fix it."""


# --------------------------------------------------------------------------- durations
_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")
_UNIT_SECONDS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


# Go's time.Duration is an int64 of nanoseconds: ParseDuration refuses anything longer (about 292 years).
MAX_DURATION = (2**63 - 1) / 1e9


def parse_duration(text: str) -> float:
    """Go's ``time.ParseDuration`` ("30s", "1h30m", "1.5h", "300ms", "0"): seconds as a float. Like Go, a
    duration beyond an int64 of nanoseconds is invalid."""
    s = text.strip()
    if s in ("0", "+0", "-0"):
        return 0.0
    sign = -1.0 if s.startswith("-") else 1.0
    s = s.lstrip("+-")
    total, pos = 0.0, 0
    if not s:
        raise ValueError(f"invalid duration {text!r}")
    while pos < len(s):
        m = _DURATION_PART.match(s, pos)
        if not m:
            raise ValueError(f"invalid duration {text!r}")
        total += float(m.group(1)) * _UNIT_SECONDS[m.group(2)]
        pos = m.end()
    if not total <= MAX_DURATION:
        raise ValueError(f"invalid duration {text!r}: longer than Go's time.Duration can hold")
    return sign * total


def positive(seconds: float | None) -> float | None:
    """A requeue period as controller-runtime takes it: one that is not positive means no requeue (None)."""
    return seconds if seconds is not None and seconds > 0 else None


def format_duration(seconds: float) -> str:
    if seconds == int(seconds):
        s = int(seconds)
        h, rem = divmod(s, 3600)
        m, sec = divmod(rem, 60)
        return "".join(f"{v}{u}" for v, u in ((h, "h"), (m, "m"), (sec, "s")) if v) or "0s"
    return f"{seconds}s"


# --------------------------------------------------------------------------- GVK and selectors
@dataclass(frozen=True, order=True)
class GVK:
    group: str
    version: str
    kind: str

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def env_suffix(self) -> str:
        """`<KIND>_<GROUP>` as the ansible-operator's environment overrides spell it."""
        return f"{self.kind}_{self.group}".upper().replace(".", "_")

    @property
    def vars_key(self) -> str:
        """`_<group>_<kind>`: the extra-var holding the whole object (dots and dashes become underscores)."""
        return re.sub(r"[.-]", "_", f"_{self.group}_{self.kind.lower()}")

    def __str__(self) -> str:
        return f"{self.api_version}, Kind={self.kind}"


@dataclass(frozen=True)
class LabelSelector:
    match_labels: dict[str, str] = field(default_factory=dict)
    match_expressions: tuple[tuple[str, str, tuple[str, ...]], ...] = ()

    def matches(self, labels: dict[str, str] | None) -> bool:
        labels = labels or {}
        for k, v in self.match_labels.items():
            if labels.get(k) != v:
                return False
        for key, op, values in self.match_expressions:
            present = key in labels
            if op == "In" and not (present and labels[key] in values):
                return False
            if op == "NotIn" and present and labels[key] in values:
                return False
            if op == "Exists" and not present:
                return False
            if op == "DoesNotExist" and present:
                return False
        return True

    @property
    def empty(self) -> bool:
        return not self.match_labels and not self.match_expressions


# --------------------------------------------------------------------------- watches
@dataclass(frozen=True)
class Finalizer:
    name: str
    role: Path | None = None
    playbook: Path | None = None
    vars: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Watch:
    gvk: GVK
    role: Path | None = None
    playbook: Path | None = None
    vars: dict[str, Any] = field(default_factory=dict)
    reconcile_period: float | None = None  # None: the --reconcile-period flag decides
    manage_status: bool = True
    watch_dependent_resources: bool = True
    watch_cluster_scoped_resources: bool = False
    max_runner_artifacts: int = DEFAULT_MAX_RUNNER_ARTIFACTS
    finalizer: Finalizer | None = None
    blacklist: tuple[GVK, ...] = ()
    selector: LabelSelector = field(default_factory=LabelSelector)
    snake_case_parameters: bool = True
    mark_unsafe: bool = False
    watch_annotations_changes: bool = False
    # ours, not the Go operator's: a dependent's status change (a pod turning unready) brings the owner back too
    watch_dependent_status_changes: bool = False
    # ours: how long a run may take before it is stopped (None: the --run-timeout flag decides; 0: no limit)
    run_timeout: float | None = None
    # not settable in watches.yaml: flags, then per-kind environment overrides
    max_concurrent_reconciles: int = 1
    ansible_verbosity: int = 2

    @property
    def target(self) -> str:
        return _describe(self.role, self.playbook)

    def run_target(self, finalizer_run: bool) -> str:
        """What a run executes: the finalizer's own role or playbook when it has one (one with only vars
        runs the main one with them)."""
        fin = self.finalizer
        if finalizer_run and fin is not None and (fin.role or fin.playbook):
            return _describe(fin.role, fin.playbook)
        return self.target


def _describe(role: Path | None, playbook: Path | None) -> str:
    return f"role {role}" if role else f"playbook {playbook}"


_FIELD_TYPES: dict[str, type | tuple[type, ...]] = {
    "group": str, "version": str, "kind": str, "role": str, "playbook": str, "vars": dict,
    "reconcilePeriod": (str, int), "manageStatus": bool, "watchDependentResources": bool,
    "watchClusterScopedResources": bool, "maxRunnerArtifacts": int, "finalizer": dict,
    "blacklist": list, "selector": dict, "snakeCaseParameters": bool, "markUnsafe": bool,
    "watchAnnotationsChanges": bool, "watchDependentStatusChanges": bool, "runTimeout": (str, int),
}
_FINALIZER_TYPES: dict[str, type] = {"name": str, "role": str, "playbook": str, "vars": dict}
_TYPE_NAMES = {str: "a string", bool: "true or false", int: "an integer", dict: "a mapping", list: "a list"}
_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def expand_env(text: str, environ: dict[str, str] | None = None) -> str:
    """`${VAR}` from the environment; an unset variable stays as written (as upstream does)."""
    env = os.environ if environ is None else environ
    return _ENV_REF.sub(lambda m: env.get(m.group(1), m.group(0)), text)


@dataclass
class _Ctx:
    file: Path
    index: int
    label: str

    def fail(self, field_name: str, message: str) -> ConfigError:
        return ConfigError(f"{self.file}: entry {self.index} ({self.label}): field {field_name!r}: {message}")


def _type_ok(value: Any, expected: type | tuple[type, ...]) -> bool:
    types = expected if isinstance(expected, tuple) else (expected,)
    if isinstance(value, bool) and bool not in types:
        return False  # YAML's true is not an integer here
    return isinstance(value, types)


def _expect(ctx: _Ctx, name: str, value: Any, expected: type | tuple[type, ...]) -> None:
    if not _type_ok(value, expected):
        types = expected if isinstance(expected, tuple) else (expected,)
        want = " or ".join(_TYPE_NAMES.get(t, t.__name__) for t in types)
        raise ctx.fail(name, f"expected {want}, got {type(value).__name__} {value!r}")


def _search_dirs(base_dirs: list[Path]) -> list[Path]:
    seen: list[Path] = []
    for d in base_dirs:
        if d not in seen:
            seen.append(d)
    return seen


def resolve_role(name: str, base_dirs: list[Path], roles_path: str | None, collections_path: str | None) -> list[Path]:
    """Where Ansible (and the ansible-operator) would look for a role, in order."""
    p = Path(name)
    if p.is_absolute():
        return [p]
    candidates: list[Path] = []
    parts = name.split(".")
    if len(parts) == 3:
        cpath = collections_path or f"/usr/share/ansible/collections:{Path.home() / '.ansible/collections'}"
        for parent in filter(None, cpath.split(":")):
            candidates.append(Path(parent) / "ansible_collections" / parts[0] / parts[1] / "roles" / parts[2])
    for parent in filter(None, (roles_path or "").split(":")):
        candidates += [Path(parent) / name, Path(parent) / "roles" / name]
    candidates += [d / "roles" / name for d in base_dirs]
    return candidates


def _gvk_list(ctx: _Ctx, name: str, value: list[Any]) -> tuple[GVK, ...]:
    out = []
    for i, item in enumerate(value):
        if not isinstance(item, dict) or not item.get("version") or not item.get("kind"):
            raise ctx.fail(f"{name}[{i}]", "expected a mapping with group, version and kind")
        unknown = set(item) - {"group", "version", "kind"}
        if unknown:
            raise ctx.fail(f"{name}[{i}]", f"unknown key(s) {sorted(unknown)}; expected group, version, kind")
        out.append(GVK(str(item.get("group") or ""), str(item["version"]), str(item["kind"])))
    return tuple(out)


def _selector(ctx: _Ctx, value: dict[str, Any]) -> LabelSelector:
    unknown = set(value) - {"matchLabels", "matchExpressions"}
    if unknown:
        raise ctx.fail("selector", f"unknown key(s) {sorted(unknown)}; expected matchLabels and/or matchExpressions")
    labels = value.get("matchLabels") or {}
    if not isinstance(labels, dict) or not all(isinstance(v, str) for v in labels.values()):
        raise ctx.fail("selector.matchLabels", "expected a mapping of label names to string values")
    exprs = []
    for i, e in enumerate(value.get("matchExpressions") or []):
        where = f"selector.matchExpressions[{i}]"
        if not isinstance(e, dict) or not isinstance(e.get("key"), str):
            raise ctx.fail(where, "expected a mapping with key, operator and values")
        op = e.get("operator")
        if op not in ("In", "NotIn", "Exists", "DoesNotExist"):
            raise ctx.fail(f"{where}.operator", f"{op!r} is not one of In, NotIn, Exists, DoesNotExist")
        values = e.get("values") or []
        if op in ("In", "NotIn") and not values:
            raise ctx.fail(f"{where}.values", f"operator {op} needs a non-empty list of values")
        if op in ("Exists", "DoesNotExist") and values:
            raise ctx.fail(f"{where}.values", f"operator {op} takes no values")
        exprs.append((e["key"], op, tuple(str(v) for v in values)))
    return LabelSelector(dict(labels), tuple(exprs))


def _env_int(name: str) -> int | None:
    """An integer from the environment; one that is not an integer is ignored with a warning (the default
    applies, as in the Go operator)."""
    raw = os.environ.get(name)
    if raw is None:
        return None
    try:
        return int(raw)
    except ValueError:
        log.warning("environment variable %s=%r is not an integer: using the default", name, raw)
        return None


def load_watches(
    path: str | os.PathLike[str],
    *,
    max_concurrent_reconciles: int = 1,
    ansible_verbosity: int = 2,
    roles_path: str | None = None,
    collections_path: str | None = None,
    cwd: Path | None = None,
) -> list[Watch]:
    file = Path(path)
    try:
        text = file.read_text()
    except OSError as exc:
        raise ConfigError(f"{file}: cannot read the watches file: {exc.strerror}; pass --watches-file") from exc
    try:
        doc = yaml.safe_load(expand_env(text))
    except yaml.YAMLError as exc:
        raise ConfigError(f"{file}: not valid YAML: {exc}") from exc
    if not isinstance(doc, list) or not doc:
        raise ConfigError(f"{file}: expected a non-empty YAML list of watches (- group: ..., version: ..., kind: ...)")
    roles_path = roles_path if roles_path is not None else os.environ.get("ANSIBLE_ROLES_PATH")
    collections_path = collections_path if collections_path is not None else os.environ.get("ANSIBLE_COLLECTIONS_PATH")
    # Upstream resolves relative paths from the working directory; the watches file's own directory is
    # tried second so that `--watches-file some/dir/watches.yaml` works from anywhere.
    base_dirs = _search_dirs([(cwd or Path.cwd()).resolve(), file.resolve().parent])
    seen: dict[GVK, int] = {}
    watches = []
    for index, entry in enumerate(doc, 1):
        if not isinstance(entry, dict):
            raise ConfigError(f"{file}: entry {index}: expected a mapping, got {type(entry).__name__}")
        label = f"{entry.get('group', '')}/{entry.get('version', '?')}, Kind={entry.get('kind', '?')}"
        ctx = _Ctx(file, index, label)
        for key, value in entry.items():
            if key not in _FIELD_TYPES:
                raise ctx.fail(key, f"unknown key; expected one of {', '.join(sorted(_FIELD_TYPES))}")
            if value is not None:
                _expect(ctx, key, value, _FIELD_TYPES[key])
        for required in ("version", "kind"):
            if not entry.get(required):
                raise ctx.fail(required, "required and must not be empty")
        gvk = GVK(entry.get("group") or "", entry["version"], entry["kind"])
        if gvk in seen:
            raise ctx.fail("kind", f"duplicate GVK {gvk}: already watched by entry {seen[gvk]}")
        seen[gvk] = index

        role, playbook = _target(ctx, "", entry, base_dirs, roles_path, collections_path, required=True)
        period = _duration_field(ctx, entry, "reconcilePeriod")
        run_timeout = _duration_field(ctx, entry, "runTimeout")
        max_artifacts = entry.get("maxRunnerArtifacts")
        if max_artifacts is not None and max_artifacts < 0:
            raise ctx.fail("maxRunnerArtifacts", f"{max_artifacts} is negative; expected 0 (keep none) or more")

        finalizer = None
        if entry.get("finalizer") is not None:
            fin = entry["finalizer"]
            for key, value in fin.items():
                if key not in _FINALIZER_TYPES:
                    raise ctx.fail(f"finalizer.{key}", "unknown key; expected name, role, playbook, vars")
                _expect(ctx, f"finalizer.{key}", value, _FINALIZER_TYPES[key])
            if not fin.get("name"):
                raise ctx.fail("finalizer.name", "required: the finalizer's name, e.g. "
                                                 f"{gvk.group or 'example.com'}/finalizer")
            frole, fplaybook = _target(ctx, "finalizer.", fin, base_dirs, roles_path, collections_path,
                                       required=not fin.get("vars"))
            finalizer = Finalizer(fin["name"], frole, fplaybook, dict(fin.get("vars") or {}))

        env_workers = _env_int(f"MAX_CONCURRENT_RECONCILES_{gvk.env_suffix}")
        if f"MAX_CONCURRENT_RECONCILES_{gvk.env_suffix}" not in os.environ:
            env_workers = _env_int(f"WORKER_{gvk.env_suffix}")  # deprecated upstream, still honoured
        workers = env_workers if env_workers and env_workers > 0 else max_concurrent_reconciles
        env_verbosity = _env_int(f"ANSIBLE_VERBOSITY_{gvk.env_suffix}")
        verbosity = env_verbosity if env_verbosity is not None and 0 <= env_verbosity <= 7 else ansible_verbosity

        def flag(name: str, default: bool, entry: dict[str, Any] = entry) -> bool:
            value = entry.get(name)
            return default if value is None else value

        watches.append(Watch(
            gvk=gvk, role=role, playbook=playbook, vars=dict(entry.get("vars") or {}),
            reconcile_period=period,
            manage_status=flag("manageStatus", True),
            watch_dependent_resources=flag("watchDependentResources", True),
            watch_cluster_scoped_resources=flag("watchClusterScopedResources", False),
            max_runner_artifacts=DEFAULT_MAX_RUNNER_ARTIFACTS if max_artifacts is None else max_artifacts,
            finalizer=finalizer,
            blacklist=_gvk_list(ctx, "blacklist", entry.get("blacklist") or []),
            selector=_selector(ctx, entry.get("selector") or {}),
            snake_case_parameters=flag("snakeCaseParameters", True),
            mark_unsafe=flag("markUnsafe", False),
            watch_annotations_changes=flag("watchAnnotationsChanges", False),
            watch_dependent_status_changes=flag("watchDependentStatusChanges", False),
            run_timeout=run_timeout,
            max_concurrent_reconciles=workers,
            ansible_verbosity=verbosity,
        ))
    return watches


def _duration_field(ctx: _Ctx, entry: dict[str, Any], name: str) -> float | None:
    """A duration of watches.yaml (a Go duration, or whole seconds); 0 or more."""
    raw = entry.get(name)
    if raw is None:
        return None
    try:
        seconds = float(raw) if isinstance(raw, int) else parse_duration(raw)
    except ValueError:
        raise ctx.fail(name, f"{raw!r} is not a duration; expected a Go duration such as "
                             '"30s", "5m" or "1h30m"') from None
    if seconds < 0:
        raise ctx.fail(name, f"{raw!r} is negative")
    return seconds


def _target(ctx: _Ctx, prefix: str, entry: dict[str, Any], base_dirs: list[Path], roles_path: str | None,
            collections_path: str | None, required: bool) -> tuple[Path | None, Path | None]:
    role, playbook = entry.get("role"), entry.get("playbook")
    if role and playbook:
        raise ctx.fail(f"{prefix}role", "role and playbook are both set; keep exactly one")
    if not role and not playbook:
        if required:
            what = "role, playbook or vars" if prefix else "role or playbook"
            raise ctx.fail(f"{prefix}role", f"neither role nor playbook is set; set exactly one ({what})")
        return None, None
    if role:
        candidates = resolve_role(role, base_dirs, roles_path, collections_path)
        for c in candidates:
            if c.is_dir():
                return c.resolve(), None
        raise ctx.fail(f"{prefix}role", f"role {role!r} not found; looked in: {', '.join(str(c) for c in candidates)}")
    p = Path(playbook)
    candidates = [p] if p.is_absolute() else [d / p for d in base_dirs]
    for c in candidates:
        if c.is_file():
            return None, c.resolve()
    raise ctx.fail(f"{prefix}playbook", f"playbook {playbook!r} not found; looked in: "
                                        f"{', '.join(str(c) for c in candidates)}")


# --------------------------------------------------------------------------- run flags
@dataclass
class RunConfig:
    """Everything `playbook-operator run` was told, flags and environment together."""

    watches_file: Path = Path("watches.yaml")
    inject_owner_ref: bool = True
    ansible_verbosity: int = 2
    ansible_roles_path: str | None = None
    ansible_collections_path: str | None = None
    ansible_args: str = ""
    reconcile_period: float = DEFAULT_RECONCILE_PERIOD
    max_concurrent_reconciles: int = 1
    max_concurrent_runs: int = 0  # 0: no cap beyond the per-kind ones
    metrics_bind_address: str = ":8443"
    metrics_secure: bool = False
    metrics_require_rbac: bool = False
    proxy_port: int = 0  # the Go ansible-operator's is 8888; see OwnerProxy.start
    health_probe_bind_address: str = ":6789"
    leader_elect: bool = False
    leader_election_id: str = ""
    leader_election_namespace: str = ""
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0
    graceful_shutdown_timeout: float = 30.0
    ansible_log_events: str = "Tasks"
    log_level: str = "info"
    log_format: str = "text"
    watch_namespaces: tuple[str, ...] = ()  # empty: all namespaces
    artifacts_dir: Path = Path("/tmp/ansible-operator/runner")
    executor: str = "warm"
    retry_backoff_base: float = 1.0
    retry_backoff_max: float = 300.0
    run_timeout: float = DEFAULT_RUN_TIMEOUT  # 0: no limit
    ansible_debug_logs: bool = False  # ANSIBLE_DEBUG_LOGS: each run's whole output in the operator's log
    required_permissions: Path | None = None  # RBAC manifests of what the roles do, checked at start-up
