"""watches.yaml: every field of the contract, and a clear error for every kind of mistake."""

from __future__ import annotations

from pathlib import Path

import pytest

from runner.config import GVK, ConfigError, load_watches, parse_duration


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "roles" / "memcached" / "tasks").mkdir(parents=True)
    (tmp_path / "roles" / "memcached" / "tasks" / "main.yml").write_text("- debug: msg=hi\n")
    (tmp_path / "roles" / "cleanup" / "tasks").mkdir(parents=True)
    (tmp_path / "playbooks").mkdir()
    (tmp_path / "playbooks" / "site.yml").write_text("- hosts: localhost\n  tasks: []\n")
    return tmp_path


def load(project: Path, text: str, **kw):
    f = project / "watches.yaml"
    f.write_text(text)
    return load_watches(f, cwd=project, roles_path="", collections_path="/nonexistent", **kw)


def test_every_field_is_read(project: Path) -> None:
    (w,) = load(project, """
- version: v1alpha1
  group: cache.example.com
  kind: Memcached
  role: memcached
  vars: {state: present, meta: '{{ ansible_operator_meta }}'}
  reconcilePeriod: 1m30s
  manageStatus: false
  watchDependentResources: false
  watchClusterScopedResources: true
  maxRunnerArtifacts: 0
  finalizer: {name: cache.example.com/finalizer, role: cleanup, vars: {state: absent}}
  blacklist: [{group: apps, version: v1, kind: Deployment}]
  selector: {matchLabels: {tier: cache}, matchExpressions: [{key: env, operator: In, values: [prod]}]}
  snakeCaseParameters: false
  markUnsafe: true
  watchAnnotationsChanges: true
  watchDependentStatusChanges: true
""", max_concurrent_reconciles=3, ansible_verbosity=1)
    assert w.gvk == GVK("cache.example.com", "v1alpha1", "Memcached")
    assert w.role == project / "roles" / "memcached"
    assert w.vars == {"state": "present", "meta": "{{ ansible_operator_meta }}"}
    assert w.reconcile_period == 90
    assert (w.manage_status, w.watch_dependent_resources, w.watch_cluster_scoped_resources) == (False, False, True)
    assert w.max_runner_artifacts == 0
    assert w.finalizer is not None and w.finalizer.role == project / "roles" / "cleanup"
    assert w.finalizer.vars == {"state": "absent"}
    assert w.blacklist == (GVK("apps", "v1", "Deployment"),)
    assert w.selector.matches({"tier": "cache", "env": "prod"})
    assert not w.selector.matches({"tier": "cache", "env": "dev"})
    assert (w.snake_case_parameters, w.mark_unsafe, w.watch_annotations_changes) == (False, True, True)
    assert w.watch_dependent_status_changes
    assert (w.max_concurrent_reconciles, w.ansible_verbosity) == (3, 1)


def test_defaults_match_the_ansible_operator(project: Path) -> None:
    (w,) = load(project, "- {version: v1, group: g.example.com, kind: K, playbook: playbooks/site.yml}\n")
    assert w.playbook == project / "playbooks" / "site.yml" and w.role is None
    assert w.reconcile_period is None  # the --reconcile-period flag decides
    assert w.manage_status and w.watch_dependent_resources and w.snake_case_parameters
    assert not (w.watch_cluster_scoped_resources or w.mark_unsafe or w.watch_annotations_changes
                or w.watch_dependent_status_changes)
    assert w.max_runner_artifacts == 20 and w.finalizer is None and w.selector.empty


def test_core_group_and_environment_expansion(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ROLE_NAME", "memcached")
    (w,) = load(project, '- {version: v1, group: "", kind: Secret, role: "${ROLE_NAME}", vars: {x: "${UNSET_VAR}"}}\n')
    assert w.gvk.group == "" and w.gvk.api_version == "v1"
    assert w.role == project / "roles" / "memcached"
    assert w.vars == {"x": "${UNSET_VAR}"}  # unset stays literal


def test_environment_overrides_per_kind(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MAX_CONCURRENT_RECONCILES_MEMCACHED_CACHE_EXAMPLE_COM", "7")
    monkeypatch.setenv("ANSIBLE_VERBOSITY_MEMCACHED_CACHE_EXAMPLE_COM", "4")
    monkeypatch.setenv("WORKER_OTHER_CACHE_EXAMPLE_COM", "5")  # the deprecated spelling still works
    a, b = load(project, """
- {version: v1, group: cache.example.com, kind: Memcached, role: memcached}
- {version: v1, group: cache.example.com, kind: Other, role: memcached}
""", max_concurrent_reconciles=2)
    assert (a.max_concurrent_reconciles, a.ansible_verbosity) == (7, 4)
    assert (b.max_concurrent_reconciles, b.ansible_verbosity) == (5, 2)


def test_roles_path_and_collection_roles(project: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    (elsewhere / "roles" / "shared").mkdir(parents=True)
    coll = tmp_path_factory.mktemp("colls")
    (coll / "ansible_collections" / "acme" / "ops" / "roles" / "db").mkdir(parents=True)
    f = project / "watches.yaml"
    f.write_text("- {version: v1, group: a.io, kind: A, role: shared}\n- {version: v1, group: a.io, kind: B, role: acme.ops.db}\n")
    a, b = load_watches(f, cwd=project, roles_path=str(elsewhere), collections_path=str(coll))
    assert a.role == elsewhere / "roles" / "shared"
    assert b.role == coll / "ansible_collections" / "acme" / "ops" / "roles" / "db"


@pytest.mark.parametrize(("text", "expected"), [
    ("- {version: v1, group: g.io, kind: K, role: memcached, reconcilePeriod: 5 minutes}\n",
     "entry 1 (g.io/v1, Kind=K): field 'reconcilePeriod': '5 minutes' is not a duration"),
    ("- {version: v1, group: g.io, kind: K, role: memcached, reconcilPeriod: 5m}\n",
     "entry 1 (g.io/v1, Kind=K): field 'reconcilPeriod': unknown key"),
    ("- {version: v1, group: g.io, kind: K, role: memcached, manageStatus: 'no'}\n",
     "field 'manageStatus': expected true or false, got str 'no'"),
    ("- {version: v1, group: g.io, kind: K, role: memcached, maxRunnerArtifacts: true}\n",
     "field 'maxRunnerArtifacts': expected an integer, got bool True"),
    ("- {version: v1, group: g.io, kind: K, role: memcached, playbook: playbooks/site.yml}\n",
     "field 'role': role and playbook are both set; keep exactly one"),
    ("- {version: v1, group: g.io, kind: K}\n",
     "field 'role': neither role nor playbook is set"),
    ("- {version: v1, group: g.io, kind: K, role: nosuchrole}\n",
     "field 'role': role 'nosuchrole' not found; looked in:"),
    ("- {version: v1, group: g.io, kind: K, playbook: nope.yml}\n",
     "field 'playbook': playbook 'nope.yml' not found"),
    ("- {version: v1, group: g.io, kind: K, role: memcached}\n- {version: v1, group: g.io, kind: K, role: memcached}\n",
     "entry 2 (g.io/v1, Kind=K): field 'kind': duplicate GVK g.io/v1, Kind=K: already watched by entry 1"),
    ("- {group: g.io, kind: K, role: memcached}\n",
     "entry 1 (g.io/?, Kind=K): field 'version': required"),
    ("- {version: v1, group: g.io, kind: K, role: memcached, finalizer: {role: cleanup}}\n",
     "field 'finalizer.name': required"),
    ("- {version: v1, group: g.io, kind: K, role: memcached, finalizer: {name: f}}\n",
     "field 'finalizer.role': neither role nor playbook is set; set exactly one (role, playbook or vars)"),
    ("- {version: v1, group: g.io, kind: K, role: memcached, selector: {matchExpressions: [{key: a, operator: Is}]}}\n",
     "field 'selector.matchExpressions[0].operator': 'Is' is not one of In, NotIn, Exists, DoesNotExist"),
    ("- {version: v1, group: g.io, kind: K, role: memcached, blacklist: [{kind: Pod}]}\n",
     "field 'blacklist[0]': expected a mapping with group, version and kind"),
    ("kind: K\n", "expected a non-empty YAML list of watches"),
])
def test_mistakes_name_file_entry_and_field(project: Path, text: str, expected: str) -> None:
    with pytest.raises(ConfigError) as err:
        load(project, text)
    assert str(project / "watches.yaml") in str(err.value)
    assert expected in str(err.value)


def test_finalizer_with_only_vars_reruns_the_main_role(project: Path) -> None:
    (w,) = load(project, "- {version: v1, group: g.io, kind: K, role: memcached, finalizer: {name: f, vars: {state: absent}}}\n")
    assert w.finalizer is not None and w.finalizer.role is None and w.finalizer.vars == {"state": "absent"}
    assert w.run_target(finalizer_run=True) == w.run_target(finalizer_run=False) == w.target


def test_a_finalizer_run_names_the_finalizers_own_role(project: Path) -> None:
    (w,) = load(project, "- {version: v1, group: g.io, kind: K, role: memcached, finalizer: {name: f, role: cleanup}}\n")
    assert w.run_target(finalizer_run=True) == f"role {project / 'roles' / 'cleanup'}"
    assert w.run_target(finalizer_run=False) == f"role {project / 'roles' / 'memcached'}"


@pytest.mark.parametrize(("text", "seconds"), [
    ("30s", 30), ("5m", 300), ("1h30m", 5400), ("1.5h", 5400), ("300ms", 0.3), ("0", 0), ("2h45m10s", 9910)])
def test_go_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "5", "m", "1d", "5 m", "abc"])
def test_bad_durations(text: str) -> None:
    with pytest.raises(ValueError):
        parse_duration(text)


def test_durations_beyond_gos_are_invalid_as_in_go() -> None:
    assert parse_duration("2562047h") == 2562047 * 3600.0  # Go's longest whole-hour duration
    for text in ("2562048h", "9999999999h", "1" + "0" * 400 + "s"):
        with pytest.raises(ValueError):
            parse_duration(text)


def test_run_timeout_of_a_watch(project: Path) -> None:
    entry = "- {version: v1, group: g, kind: K, role: memcached, runTimeout: %s}\n"
    assert load(project, entry % "15m")[0].run_timeout == 900
    assert load(project, entry % "0")[0].run_timeout == 0  # no limit
    assert load(project, "- {version: v1, group: g, kind: K, role: memcached}\n")[0].run_timeout is None
    with pytest.raises(ConfigError, match="'runTimeout': '-1m' is negative"):
        load(project, entry % "'-1m'")


def test_an_environment_override_that_is_no_integer_falls_back_to_the_default(
        project: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """As the Go operator: a warning and the default, not a refusal to start."""
    monkeypatch.setenv("MAX_CONCURRENT_RECONCILES_K_G", "lots")
    monkeypatch.setenv("WORKER_K_G", "5")  # not read when the newer spelling is set, as in Go
    monkeypatch.setenv("ANSIBLE_VERBOSITY_K_G", "loud")
    (w,) = load(project, "- {version: v1, group: g, kind: K, role: memcached}\n", max_concurrent_reconciles=3)
    assert (w.max_concurrent_reconciles, w.ansible_verbosity) == (3, 2)
    assert "MAX_CONCURRENT_RECONCILES_K_G='lots' is not an integer" in caplog.text


def test_artifacts_are_laid_out_as_the_go_operators() -> None:
    from runner.config import GVK, Watch
    from runner.reconcile import Reconciler, Settings

    def private_dir(gvk: GVK, namespace: str, name: str) -> str:
        reconciler = Reconciler.__new__(Reconciler)
        reconciler.watch, reconciler.settings = Watch(gvk), Settings(0, Path("/r"), "", "Tasks")
        return str(reconciler.private_dir(namespace, name))

    assert private_dir(GVK("cache.example.com", "v1", "Memcached"), "ns", "m") == "/r/cache.example.com/v1/Memcached/ns/m"
    assert private_dir(GVK("example.com", "v1", "Platform"), "", "p") == "/r/example.com/v1/Platform/p"
    assert private_dir(GVK("", "v1", "Secret"), "ns", "s") == "/r/v1/Secret/ns/s"


def test_ansible_debug_logs_is_read_as_go_reads_a_bool(monkeypatch: pytest.MonkeyPatch) -> None:
    from runner.cli import config_from_args, run_parser

    for value, expected in (("true", True), ("1", True), ("T", True), ("false", False), ("yes", False)):
        monkeypatch.setenv("ANSIBLE_DEBUG_LOGS", value)
        assert config_from_args(run_parser().parse_args([])).ansible_debug_logs is expected
