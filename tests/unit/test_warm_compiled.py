"""Compiled templates kept by the warm executor (ansible-core 2.18) give what compiling anew gives: the same
values, the same errors, lookups refused where Ansible refuses them, and a fresh compile wherever compiling
ran a filter or test (its value could differ) or the environment differs."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleError
from ansible.parsing.dataloader import DataLoader
from ansible.template import AnsibleEnvironment, Templar
from jinja2 import nodes

from runner.execution import warm_compiled

pytestmark = pytest.mark.skipif(not hasattr(__import__("ansible.template", fromlist=["x"]), "AnsibleEnvironment"),
                                reason="ansible-core 2.18's templating")

VARIABLES = {"name": "db", "items": [1, 2, 3], "nested": "{{ name }}-{{ items | length }}",
             "spec": {"replicas": 3, "image": "{{ name }}:16"}}

TEMPLATES = [
    "{{ name }}", "{{ nested }}", "{{ spec }}", "{{ items | sum }}", "{{ 'abc' | upper }}", "{{ [3, 1] | sort }}",
    "{% if items | length > 2 %}many{% else %}few{% endif %}", "{{ name | default('x') }}-{{ missing | default(1) }}",
    "{{ lookup('env', 'HOME') }}", "{# comment #}{{ name }}\n\n", "plain text",
    "{{ spec | to_json }}", "{{ ('a' if true else name) | upper }}",
]

ERRORS = ["{{ name ", "{{ name | no_such_filter }}", "{% if %}", "{{ missing }}"]


@pytest.fixture
def kept(monkeypatch: pytest.MonkeyPatch) -> dict:
    monkeypatch.setattr(AnsibleEnvironment, "compile", AnsibleEnvironment.compile)
    monkeypatch.setattr(nodes._FilterTestCommon, "as_const", nodes._FilterTestCommon.as_const)
    monkeypatch.setattr(warm_compiled, "_CODE", {})
    assert warm_compiled.install()
    return warm_compiled._CODE


def _templar() -> Templar:
    return Templar(loader=DataLoader(), variables=VARIABLES)


def _outcome(template: str, **kwargs: object) -> object:
    try:
        return ("value", repr(_templar().template(template, **kwargs)))
    except Exception as exc:
        return ("error", type(exc).__name__, str(exc))


def test_the_same_values_and_errors_as_compiling_anew(monkeypatch: pytest.MonkeyPatch) -> None:
    anew = [_outcome(t) for t in TEMPLATES + ERRORS]
    with monkeypatch.context() as m:
        m.setattr(AnsibleEnvironment, "compile", AnsibleEnvironment.compile)
        m.setattr(nodes._FilterTestCommon, "as_const", nodes._FilterTestCommon.as_const)
        m.setattr(warm_compiled, "_CODE", {})
        assert warm_compiled.install()
        first = [_outcome(t) for t in TEMPLATES + ERRORS]
        again = [_outcome(t) for t in TEMPLATES + ERRORS]  # from the kept code where there is some
        assert warm_compiled._CODE
    assert first == anew
    assert again == anew


def test_kept_code_is_used_again(kept: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    generated = []
    generate = AnsibleEnvironment._generate

    def counting(self: AnsibleEnvironment, *args: object, **kwargs: object) -> str:
        generated.append(args[0])
        return generate(self, *args, **kwargs)

    monkeypatch.setattr(AnsibleEnvironment, "_generate", counting)
    values = [_templar().template("{{ name }}-{{ items | length }}") for _ in range(3)]
    assert values == ["db-3"] * 3
    assert len(generated) == 1


def test_a_filter_run_while_compiling_is_run_again(kept: dict) -> None:
    """Jinja's optimiser calls a filter on constants when it compiles: that compile is never kept."""
    drawn = []

    def draw(value: str) -> str:
        drawn.append(value)
        return f"{value}-{len(drawn)}"

    templar = _templar()
    templar.environment.filters["draw"] = draw
    assert templar.template("{{ 'salt' | draw }}") == "salt-1"
    templar = _templar()
    templar.environment.filters["draw"] = draw
    assert templar.template("{{ 'salt' | draw }}") == "salt-2"
    assert not kept


def test_lookups_refused_once_stay_allowed_elsewhere(kept: dict) -> None:
    """Ansible refuses lookups in one template by changing that template's globals: a kept compile is a new
    template each time, so the refusal does not carry over."""
    template = "{{ lookup('env', 'HOME') }}"
    with pytest.raises(AnsibleError):
        _templar().template(template, disable_lookups=True)
    assert _templar().template(template)


def test_other_delimiters_compile_anew(kept: dict) -> None:
    templar = _templar()
    assert templar.template("{{ name }} [[ name ]]") == "db [[ name ]]"
    overridden = templar.template("#jinja2:variable_start_string:'[[', variable_end_string:']]'\n{{ name }} [[ name ]]")
    assert overridden == "{{ name }} db"
    assert len(kept) == 2
