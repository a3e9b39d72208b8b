"""The primary kinds' cache: what a list or a watch event means for the queue (an informer's semantics)."""

from __future__ import annotations

from typing import Any

from runner.config import GVK, Watch
from runner.watching import ObjectStore


class Queue:
    def __init__(self) -> None:
        self.added: list[tuple[str, str]] = []
        self.forgotten: list[tuple[str, str]] = []

    def add(self, key: tuple[str, str], reason: str = "change") -> None:
        self.added.append(key)

    def forget(self, key: tuple[str, str]) -> None:
        self.forgotten.append(key)


def widget(name: str, uid: str, spec: dict[str, Any] | None = None, rv: str = "1", ns: str = "a") -> dict[str, Any]:
    return {"metadata": {"namespace": ns, "name": name, "uid": uid, "resourceVersion": rv, "generation": 1},
            "spec": spec or {}}


def store() -> tuple[ObjectStore, Queue]:
    queue = Queue()
    return ObjectStore(Watch(GVK("g", "v1", "Widget")), queue), queue  # type: ignore[arg-type]


def test_a_relist_reports_what_is_gone_in_its_own_scope() -> None:
    s, q = store()
    a, b = s.scope("a"), s.scope("b")
    for scope, obj in ((a, widget("x", "1")), (a, widget("y", "2")), (b, widget("z", "3", ns="b"))):
        scope.event("ADDED", obj)
    q.added.clear()
    a.relist_begin()
    a.listed(widget("x", "1"))
    a.relist_end()
    assert s.latest(("a", "y")) is None and q.forgotten == [("a", "y")] and q.added == [("a", "y")]
    assert s.latest(("b", "z")) is not None  # another namespace's reflector has its own list


def test_the_same_name_with_another_uid_is_another_object() -> None:
    s, q = store()
    s.scope(None).event("ADDED", widget("x", "1", {"size": 1}))
    q.added.clear()
    scope = s.scope(None)
    scope.relist_begin()
    scope.listed(widget("x", "2", {"size": 1}, rv="9"))  # deleted and created again while not watched
    scope.relist_end()
    assert q.added == [("a", "x")]
    assert s.latest(("a", "x"))["metadata"]["uid"] == "2"


def test_an_unchanged_relist_queues_nothing() -> None:
    s, q = store()
    s.scope(None).event("ADDED", widget("x", "1"))
    q.added.clear()
    scope = s.scope(None)
    scope.relist_begin()
    scope.listed(widget("x", "1", rv="5"))
    scope.relist_end()
    assert q.added == [] and q.forgotten == []


def test_the_reconcilers_own_reads_of_another_object_are_ignored() -> None:
    s, _ = store()
    s.scope(None).event("ADDED", widget("x", "1", rv="5"))
    s.observed(("a", "x"), widget("x", "2", {"old": True}, rv="9"))
    assert s.latest(("a", "x"))["metadata"]["uid"] == "1"
