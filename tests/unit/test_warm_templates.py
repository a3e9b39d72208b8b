"""The warm executor's compiled-template cache, with Ansible's own templating: what a task sees is the same
with and without it, and what it keeps is keyed by the template's text.

Each case runs in a fresh interpreter: the cache replaces Jinja's compile methods for the whole process."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

SCRIPT = textwrap.dedent("""
    import json, os, sys
    from runner.execution import warm_templates
    if sys.argv[2] == "cached":
        warm_templates.install(sys.argv[1])
    from ansible._internal._datatag._tags import TrustedAsTemplate
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar

    templar = Templar(loader=DataLoader(), variables={"x": 3, "names": ["a", "b"]})
    out = []
    for kind, text in json.loads(sys.argv[3]):
        try:
            text = TrustedAsTemplate().tag(text)
            value = templar.template(text) if kind == "template" else templar.evaluate_conditional(text)
            out.append(["ok", str(value)])
        except Exception as exc:
            out.append(["error", type(exc).__name__, str(exc).splitlines()[0]])
    print(json.dumps(out))
""")

CASES = [
    ["template", "{{ x + 1 }} {{ names | map('upper') | join(',') }}"],
    ["conditional", "x > 2 and names | length == 2"],
    ["template", "{{ x | no_such_filter }}"],
    ["conditional", "x >"],
    ["template", "{% if x %}{{ x }}{% endif"],
    ["template", "{{ x }} {{ not_defined_anywhere }}"],
    ["template", "{{ x + 1 }} {{ names | map('upper') | join(',') }}"],
]


def render(cache: Path, mode: str, cases: list[list[str]]) -> list[list[str]]:
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(cache), mode, json.dumps(cases)],
                          capture_output=True, text=True, timeout=120, check=True)
    return json.loads(proc.stdout)


@pytest.mark.parametrize("runs", [1, 2])
def test_results_and_errors_are_the_same_as_without_the_cache(tmp_path: Path, runs: int) -> None:
    plain = render(tmp_path / "unused", "plain", CASES)
    for _ in range(runs):  # the second run finds every template that compiled in the first on disk
        assert render(tmp_path / "cache", "cached", CASES) == plain
    assert plain[0] == ["ok", "4 A,B"] and plain[1] == ["ok", "True"]
    assert [r[0] for r in plain[2:6]] == ["error"] * 4


def test_only_templates_that_compiled_are_kept_and_an_edit_is_a_new_entry(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    render(cache, "cached", CASES)
    assert len(list(cache.iterdir())) == 3  # those that compiled, once each; syntax errors are not kept
    assert render(cache, "cached", [["template", "{{ x * 10 }}"]]) == [["ok", "30"]]
    assert len(list(cache.iterdir())) == 4
