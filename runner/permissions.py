"""Whether this operator may do what its roles do, asked of the API server at start-up.

`--required-permissions FILE` names the rules the roles need, as RBAC manifests (a ClusterRole or Role, e.g. the one
`make deploy` applies) or a bare list of rules. Each verb on each resource is asked with a SelfSubjectAccessReview:
cluster-wide, or in each watched namespace (WATCH_NAMESPACE) for namespaced resources. An operator that lacks one
stops at once with a line naming every missing permission, instead of failing (or, worse, deciding without the data
it needs: a failover that cannot read WAL positions) the first time a role needs it.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from .kube import ApiError, Kube

log = logging.getLogger(__name__)

RULE_KINDS = ("ClusterRole", "Role")
CONCURRENT_REVIEWS = 8


class PermissionsFileError(Exception):
    pass


@dataclass(frozen=True, order=True)
class Permission:
    group: str
    resource: str  # the plural
    subresource: str
    verb: str

    def __str__(self) -> str:
        what = f"{self.resource}/{self.subresource}" if self.subresource else self.resource
        return f"{self.verb} {what}" + (f".{self.group}" if self.group else "")


def _rules(doc: Any) -> list[dict[str, Any]]:
    if isinstance(doc, list):
        return [r for r in doc if isinstance(r, dict)]
    if isinstance(doc, dict) and doc.get("kind") in RULE_KINDS:
        return [r for r in doc.get("rules") or [] if isinstance(r, dict)]
    return []


def load_permissions(path: Path) -> list[Permission]:
    """Every (group, resource, verb) the manifests at ``path`` grant, wildcards and nonResourceURLs left out (they
    cannot be asked one by one)."""
    try:
        docs = list(yaml.safe_load_all(path.read_text()))
    except (OSError, yaml.YAMLError) as exc:
        raise PermissionsFileError(f"could not read the required permissions {path}: {exc}") from None
    found: set[Permission] = set()
    for doc in docs:
        for rule in _rules(doc):
            for group in rule.get("apiGroups") or []:
                for resource in rule.get("resources") or []:
                    for verb in rule.get("verbs") or []:
                        if "*" in (group, resource, verb):
                            continue
                        plural, _, sub = str(resource).partition("/")
                        found.add(Permission(str(group), plural, sub, str(verb)))
    if not found:
        raise PermissionsFileError(f"{path} names no permission (a ClusterRole, a Role, or a list of rules)")
    return sorted(found)


async def _namespaced(kube: Kube, group: str, plural: str, versions: dict[str, list[str]],
                      listings: dict[str, list[dict[str, Any]]]) -> bool:
    """Whether the resource is namespaced, from discovery (any version that serves it); namespaced when unknown.
    ``listings`` keeps each group version's resources, read once for all the resources of a group."""
    paths = [f"/apis/{group}/{v}" if group else f"/api/{v}" for v in versions.get(group, ["v1"])]
    for path in paths:
        if path not in listings:
            try:
                listings[path] = ((await kube.request("GET", path)) or {}).get("resources", [])
            except ApiError:
                listings[path] = []
        for r in listings[path]:
            if r.get("name") == plural:
                return bool(r.get("namespaced"))
    return True


async def _versions(kube: Kube) -> dict[str, list[str]]:
    try:
        groups = await kube.request("GET", "/apis")
    except ApiError:
        return {}
    return {g["name"]: [v["version"] for v in g.get("versions", [])] for g in (groups or {}).get("groups", [])}


async def missing_permissions(kube: Kube, wanted: list[Permission], namespaces: tuple[str, ...]) -> list[str]:
    """The permissions the operator's credentials lack ("verb resource.group" and where), [] when none."""
    versions = await _versions(kube)
    listings: dict[str, list[dict[str, Any]]] = {}
    scope: dict[tuple[str, str], bool] = {}
    for p in wanted:
        if (p.group, p.resource) not in scope:
            scope[p.group, p.resource] = await _namespaced(kube, p.group, p.resource, versions, listings)
    limit = asyncio.Semaphore(CONCURRENT_REVIEWS)

    async def ask(p: Permission, namespace: str) -> str | None:
        async with limit:
            allowed = await kube.allowed(p.verb, p.group, p.resource, namespace, p.subresource)
        return None if allowed else f"{p}" + (f" in {namespace}" if namespace else "")

    asks = [ask(p, ns) for p in wanted
            for ns in (namespaces if namespaces and scope[p.group, p.resource] else ("",))]
    return [m for m in await asyncio.gather(*asks) if m]


async def check(kube: Kube, path: Path, namespaces: tuple[str, ...]) -> list[str]:
    """What stops the operator: the file's problem, or the missing permissions; [] when everything is allowed."""
    try:
        wanted = load_permissions(path)
    except PermissionsFileError as exc:
        return [str(exc)]
    try:
        return await missing_permissions(kube, wanted, namespaces)
    except (ApiError, aiohttp.ClientError, TimeoutError) as exc:
        return [f"could not ask whether the permissions in {path} are granted: {exc or type(exc).__name__}"]
