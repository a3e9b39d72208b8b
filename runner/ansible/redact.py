"""Removes Secret data from task results before anything writes them (stdout, job events, logs)."""

from __future__ import annotations

from typing import Any

REDACTED = "<redacted>"
_DEFINITION_KEYS = ("definition", "resource_definition")


def _looks_like_secret(d: dict[str, Any]) -> bool:
    if d.get("kind") == "Secret":
        return True
    # List items come back without kind; a Secret is the only core object with metadata, data and type.
    return "metadata" in d and "type" in d and ("data" in d or "stringData" in d)


def redact(value: Any, secret_context: bool = False) -> Any:
    """A copy of ``value`` with the data of every Secret in it replaced."""
    if isinstance(value, dict):
        is_secret = _looks_like_secret(value) or (secret_context and "metadata" in value)
        out = {}
        for k, v in value.items():
            if is_secret and k in ("data", "stringData") and isinstance(v, dict):
                out[k] = dict.fromkeys(v, REDACTED)
            elif k in _DEFINITION_KEYS and isinstance(v, str) and "Secret" in v:
                out[k] = f"{REDACTED} (a definition that holds a Secret)"
            else:
                out[k] = redact(v, secret_context)
        return out
    if isinstance(value, list):
        return [redact(v, secret_context) for v in value]
    return value


def redact_result(result: dict[str, Any]) -> dict[str, Any]:
    args = (result.get("invocation") or {}).get("module_args") or {}
    return redact(result, secret_context=args.get("kind") == "Secret")
