"""The extra-vars a run receives, exactly as the Go ansible-operator builds them.

Order (later wins): spec keys (snake_cased unless disabled, unsafe-wrapped with markUnsafe),
``ansible_operator_meta``, ``_<group>_<kind>`` (the whole object), ``_<group>_<kind>_spec``, the
watch's ``vars``, and on finalizer runs the finalizer's ``vars``.
"""

from __future__ import annotations

import re
from typing import Any

from .config import Watch

_NUMBER_SEQUENCE = re.compile(r"([a-zA-Z])(\d+)([a-zA-Z](\d+))")
# Go iterates this map in random order; a fixed order keeps our output stable and matches upstream's
# tests, which never mix two special words whose order would matter.
_WORD_MAPPING = {"http": "HTTP", "url": "URL", "ip": "IP"}


def _preprocess_word_mapping(value: str) -> str:
    for word in _WORD_MAPPING.values():
        idx = value.find(word)
        if idx < 0:
            continue
        end = idx + len(word)
        if end - 1 == len(value) - 1:
            value = value[:idx] + "_" + value[idx:]
        elif value[end] == "s":
            if end == len(value) - 1:
                value = value[:idx] + "_" + value[idx:end] + "S"
            elif idx == 0:
                value = value[:end] + "S" + "_" + value[end + 1:]
            else:
                value = value[:idx] + "_" + value[idx:end] + "S" + "_" + value[end + 1:]
        elif idx == 0:
            value = value[:end] + "_" + value[end:]
        else:
            value = value[:idx] + "_" + value[idx:end] + "_" + value[end:]
    return value


def to_snake(s: str) -> str:
    """Port of the ansible-operator's ``paramconv.ToSnake`` (egressIPs → egress_ips, HTTP/URL/IP as words)."""
    s = _NUMBER_SEQUENCE.sub(r"\1 \2 \3", s).strip(" ")
    if not s:
        return s
    prefix = "_" if "A" <= s[0] <= "Z" else ""
    s = _preprocess_word_mapping(s)
    bits: list[str] = []
    n = ""
    i_real = -1
    for i, v in enumerate(s):
        i_real += 1
        next_case_changed = False
        if i + 1 < len(s):
            nxt = s[i + 1]
            if (v.isupper() and nxt.islower()) or (v.islower() and nxt.isupper()):
                next_case_changed = v.isascii() and nxt.isascii()
        if i_real > 0 and n and n[-1] != "_" and next_case_changed:
            if "A" <= v <= "Z":
                bits.append(n.lower())
                n = v
                i_real = 0
            elif "a" <= v <= "z":
                bits.append((n + v).lower())
                n = ""
                i_real = -1
        elif v in " _-":
            bits.append(n.lower())
            n = ""
            i_real = -1
        else:
            n += v
    bits.append(n.lower())
    joined = "_".join(bits)
    return joined if bits[0] in _WORD_MAPPING else prefix + joined


def snake_keys(value: Any) -> Any:
    if isinstance(value, dict):
        return {to_snake(k): snake_keys(v) for k, v in value.items()}
    if isinstance(value, list):
        return [snake_keys(v) for v in value]
    return value


def mark_unsafe(value: Any) -> Any:
    """Every string wrapped so that Ansible never templates it (``markUnsafe: true``)."""
    if isinstance(value, dict):
        return {k: mark_unsafe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [mark_unsafe(v) for v in value]
    if isinstance(value, str):
        return {"__ansible_unsafe": value}
    return value


def build_extravars(watch: Watch, obj: dict[str, Any], finalizer_run: bool) -> dict[str, Any]:
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        spec = {}
    params: dict[str, Any] = snake_keys(spec) if watch.snake_case_parameters else dict(spec)
    if watch.mark_unsafe:
        params = {k: mark_unsafe(v) for k, v in params.items()}
    meta = obj.get("metadata", {})
    params["ansible_operator_meta"] = {"name": meta.get("name"), "namespace": meta.get("namespace") or ""}
    key = watch.gvk.vars_key
    params[key] = mark_unsafe(obj) if watch.mark_unsafe else obj
    params[f"{key}_spec"] = mark_unsafe(spec) if watch.mark_unsafe else spec
    params.update(watch.vars)
    if finalizer_run and watch.finalizer:
        params.update(watch.finalizer.vars)
    return params
