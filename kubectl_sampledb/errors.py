"""Errors a user acts on: each is one line on stderr, and the command exits 1."""

from __future__ import annotations

import json
import re


class CliError(Exception):
    """Printed as ``error: <message>``."""


class NotFound(CliError):
    def __init__(self, kind: str, name: str, namespace: str) -> None:
        super().__init__(f"{kind} {name} not found in namespace {namespace}")


class Forbidden(CliError):
    """Names the verb and the resource that RBAC refused, and whom, so the user knows what to ask for."""

    def __init__(self, verb: str, resource: str, namespace: str, user: str | None = None) -> None:
        who = f'User "{user}"' if user else "you"
        super().__init__(f"forbidden: {who} cannot {verb} {resource} in namespace {namespace}")


class AlreadyExists(CliError):
    def __init__(self, kind: str, name: str, namespace: str) -> None:
        super().__init__(f"{kind} {name} already exists in namespace {namespace}")


class NotAServer(CliError):
    """A server (pod) named on the command line that the database does not have."""

    def __init__(self, server: str, database: str, servers: list[str]) -> None:
        super().__init__(f"{server} is not a server of sampledb {database} "
                         f"(its servers: {', '.join(servers) or 'none'})")


def server_message(body: object) -> str:
    """The API server's own message from an error body (a Status object), else the body as text."""
    if isinstance(body, bytes):
        body = body.decode(errors="replace")
    if isinstance(body, str):
        try:
            parsed = json.loads(body)
        except ValueError:
            return body.strip()
        if isinstance(parsed, dict) and isinstance(parsed.get("message"), str):
            return parsed["message"]
        return body.strip()
    return ""


def user_in(message: str) -> str | None:
    """The user an RBAC refusal names: 'User "system:serviceaccount:ns:sa" cannot get resource ...' (its quotes
    escaped when the message comes inside the repr of a websocket handshake's body)."""
    found = re.search(r'User \\*"([^"\\]+)', message)
    return found.group(1) if found else None
