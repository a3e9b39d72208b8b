"""The warm executor's faster templating of whole data structures (ansible-core 2.18) gives what Ansible's own
gives: the same values, types and unsafe marks, for every kind of value, and the same copies."""

from __future__ import annotations

import copy

import pytest
from ansible.parsing.dataloader import DataLoader
from ansible.template import AnsibleEnvironment, Templar
from ansible.utils.unsafe_proxy import AnsibleUnsafeText, wrap_var

from runner.execution import warm_templar

POD = {"metadata": {"name": "db-0", "labels": {"app": "db"}, "managedFields": [{"f:spec": {".": {}}}]},
       "status": {"conditions": [{"type": "Ready", "status": "True"}], "restartCount": 0, "ratio": 0.5,
                  "ready": True, "gone": None, "pair": (1, "a"), "é": "\ud800 ünïcode"}}

VARIABLES = {
    "pods": [POD, POD],
    "registered": wrap_var({"resources": [POD], "note": "{{ not templated }}"}),  # a module's result: unsafe
    "numbers": {1: "one", 2.5: "two and a half", None: "none", False: "no"},
    "odd": {"nan": float("nan"), "bytes": b"x", "set": {1, 2}},
    "deep": [[[[[["bottom"]]]]]],
    "empty_list": [], "empty_dict": {},
    "text": "[1, 2]", "yes": "True",
}

EXPRESSIONS = [
    "{{ pods }}", "{{ pods | first }}", "{{ registered }}", "{{ registered.resources }}", "{{ numbers }}",
    "{{ odd }}", "{{ odd.nan }}", "{{ [odd.nan] }}", "{{ [odd.bytes] }}", "{{ [odd.set] }}", "{{ deep }}",
    "{{ empty_list }}", "{{ empty_dict }}", "{{ text }}", "{{ yes }}", "{{ pods | length }}",
    "{{ pods }}{{ pods }}", "x{{ pods }}", "{{ pods | map(attribute='metadata.name') | list }}",
    "{{ (1, 2) }}", "{{ registered.note }}", "{{ {'a': registered.note} }}", "[{{ 1 }}, {{ 2 }}]",
    "{{ pods | to_json }}", "{{ {'k': [1, none, true]} }}",
]


def _render(expression: str) -> object:
    return Templar(loader=DataLoader(), variables=VARIABLES).template(expression)


def _shape(value: object) -> object:
    """A value's repr with every type and unsafe mark spelled out."""
    if isinstance(value, dict):
        return ("dict", [(_shape(k), _shape(v)) for k, v in value.items()])
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, [_shape(v) for v in value])
    return (type(value).__name__, repr(value), getattr(value, "__UNSAFE__", False))


@pytest.fixture
def faster(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(AnsibleEnvironment, "concat", AnsibleEnvironment.concat)
    monkeypatch.setattr(copy, "_deepcopy_dispatch", dict(copy._deepcopy_dispatch))
    assert warm_templar.install()


def test_the_same_values_as_ansibles_own(monkeypatch: pytest.MonkeyPatch) -> None:
    ansibles = [_shape(_render(e)) for e in EXPRESSIONS]
    with monkeypatch.context() as m:
        m.setattr(AnsibleEnvironment, "concat", AnsibleEnvironment.concat)
        m.setattr(copy, "_deepcopy_dispatch", dict(copy._deepcopy_dispatch))
        assert warm_templar.install()
        ours = [_shape(_render(e)) for e in EXPRESSIONS]
    for expression, theirs, mine in zip(EXPRESSIONS, ansibles, ours, strict=True):
        assert mine == theirs, expression


def test_data_is_copied_not_shared(faster: None) -> None:
    """A template's result is a fresh value: changing it changes no variable (as the parsed repr was)."""
    pods = Templar(loader=DataLoader(), variables=VARIABLES).template("{{ pods }}")
    assert pods[0]["metadata"] == POD["metadata"] and pods is not VARIABLES["pods"]
    pods[0]["metadata"]["name"] = "changed"
    assert VARIABLES["pods"][0]["metadata"]["name"] == "db-0"


def _nested(depth: int) -> list:
    value: list = []
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize(("value", "copied"), [
    ([1, True, 2.5, None, "s", (1, "t"), {"k": -0.0}], True),
    ([float("inf")], False), ({"b": b"x"}, False), ([{1}], False), ([object()], False),
    ([10**5000], False),  # repr refuses it
    (_nested(150), False),  # deeper than Python's parser takes at 200: Ansible keeps the text
])
def test_what_is_copied_directly(value: object, copied: bool) -> None:
    """Only values whose repr parses back to an equal copy; the rest take Ansible's road."""
    if copied:
        assert warm_templar._copy(value, set()) == value
    else:
        with pytest.raises(warm_templar._NotLiteral):
            warm_templar._copy(value, set())


def test_an_int_as_its_repr_shows_it() -> None:
    class Odd(int):
        def __int__(self) -> int:
            return 7

    assert warm_templar._copy([Odd(3)], set()) == [3]


def test_a_cycle_takes_ansibles_road() -> None:
    looped: list = [1]
    looped.append(looped)
    with pytest.raises(warm_templar._NotLiteral):
        warm_templar._copy(looped, set())


def test_unsafe_text_deep_copies_as_itself(faster: None) -> None:
    data = wrap_var({"a": ["x", {"b": "y"}]})
    copied = copy.deepcopy(data)
    assert copied == data and copied is not data and copied["a"] is not data["a"]
    assert isinstance(copied["a"][0], AnsibleUnsafeText) and copied["a"][0] is data["a"][0]
