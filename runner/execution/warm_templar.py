"""Faster roads to the same values in ansible-core 2.18's templating: whole data structures, and copies.

With ``jinja2_native`` off (2.18's default), a template whose one expression yields a list or a dict
(``"{{ pods }}"``, ``"{{ x | from_yaml }}"``, every ``vars:`` entry that holds data) is turned into its
``repr`` and parsed back with ``ast.literal_eval`` (``ansible_eval_concat``). For a few Kubernetes objects that
is tens of milliseconds, paid again each time a variable refers to another: it was a third of a SampleDB
reconcile's time in the controller. For values whose ``repr`` is exactly the built-in one (str, int, bool,
finite float, None, list, tuple, dict, including Ansible's subclasses of them), parsing the ``repr`` back gives
a fresh copy with plain ``str`` strings; that copy is made here directly. Anything else (a NaN, bytes, a set,
an object, a cycle) takes Ansible's own road, so the result is always what Ansible would give.

ansible-core 2.19 templates natively and has no such step; there nothing is changed.
"""

from __future__ import annotations

import copy
import math
from typing import Any

# str's own repr, and Ansible's unsafe text's (the same text, marked unsafe)
_STR_REPRS: set[Any] = {str.__repr__}


class _NotLiteral(Exception):
    """The value's repr would not parse back to an equal copy: Ansible's own road decides."""


_MAX_DEPTH = 100  # Python's parser refuses 200 nested brackets, and Ansible then keeps the text
_MAX_INT_BITS = 14_000  # about 4,200 digits: repr refuses an int over 4,300


def _copy(value: Any, active: set[int]) -> Any:
    """What ``ast.literal_eval(repr(value))`` returns, or _NotLiteral."""
    kind = type(value).__repr__
    if value is None or type(value) is bool:
        return value
    if kind in _STR_REPRS:
        return str.__str__(value)
    if kind is int.__repr__:
        if int.bit_length(value) > _MAX_INT_BITS:
            raise _NotLiteral
        return int.__int__(value)  # (a subclass's own __int__ is not what its repr shows)
    if kind is float.__repr__:
        if not math.isfinite(value):  # 'nan', 'inf': not literals
            raise _NotLiteral
        return float.__float__(value)
    if kind in (list.__repr__, tuple.__repr__, dict.__repr__):
        if id(value) in active or len(active) >= _MAX_DEPTH:  # a cycle's repr shows '[...]'
            raise _NotLiteral
        active.add(id(value))
        try:
            if kind is dict.__repr__:
                return {_copy(k, active): _copy(v, active) for k, v in dict.items(value)}
            items = [_copy(v, active) for v in (list.__iter__(value) if kind is list.__repr__ else tuple.__iter__(value))]
            return items if kind is list.__repr__ else tuple(items)
        finally:
            active.discard(id(value))
    raise _NotLiteral


def install() -> bool:
    """Puts the faster concat in front of Ansible's for every template of this process and its forks."""
    try:
        from ansible.template import AnsibleEnvironment
        from ansible.template.native_helpers import _is_unsafe, ansible_eval_concat
        from ansible.utils.native_jinja import NativeJinjaText
        from ansible.utils.unsafe_proxy import AnsibleUnsafeBytes, AnsibleUnsafeText, wrap_var
    except ImportError:  # ansible-core 2.19 and later
        return False
    # Ansible's unsafe strings are immutable values, yet deepcopy rebuilds each through __reduce__: the
    # template lookup deep-copies every variable of the task (registered results included) each time,
    # ~0.1 s a template late in a SampleDB run. Copied as str and bytes are, by being themselves.
    for unsafe in (AnsibleUnsafeText, AnsibleUnsafeBytes):
        copy._deepcopy_dispatch[unsafe] = copy._deepcopy_atomic
    if getattr(AnsibleEnvironment.concat, "faster", False):
        return True
    if AnsibleEnvironment.concat is not ansible_eval_concat:
        return False

    def eval_concat(nodes: Any) -> Any:
        nodes = iter(nodes)
        first = next(nodes, _END)
        if first is _END:
            return ""
        second = next(nodes, _END)
        # Ansible converts str(value), which is the repr for these types, and only what starts with [ or {
        if second is _END and type(first).__repr__ in (list.__repr__, dict.__repr__) \
                and type(first).__str__ is object.__str__ and not isinstance(first, NativeJinjaText):
            try:
                out = _copy(first, set())
            except (_NotLiteral, RecursionError):
                pass
            else:
                return wrap_var(out) if _is_unsafe(first) else out
        rest = [first] if second is _END else [first, second]
        return ansible_eval_concat(_chain(rest, nodes))

    _STR_REPRS.add(AnsibleUnsafeText.__repr__)
    eval_concat.faster = True  # type: ignore[attr-defined]
    AnsibleEnvironment.concat = staticmethod(eval_concat)
    return True


_END = object()


def _chain(head: list[Any], tail: Any):
    yield from head
    yield from tail
