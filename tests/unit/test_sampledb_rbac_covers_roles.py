"""deploy/rbac/role.yaml grants every verb the SampleDB roles use, read from the roles themselves: each
kubernetes.core / operator_sdk.util task and each k8s lookup, with the kinds its arguments, loop or template name.
The operator as deployed checks role.yaml's list at start-up (--required-permissions); this keeps that list whole."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
ROLES = ROOT / "roles"

# what each way of reaching the API server asks of it
STATE_VERBS = {"present": {"get", "create", "patch"}, "patched": {"get", "patch"}, "absent": {"get", "delete"}}
KIND = re.compile(r"""\bkind(?:'|")?\s*[:=]\s*(?:'|")?([A-Z][A-Za-z]+)""")
LOOKUP = re.compile(r"""(?:query|lookup)\('kubernetes\.core\.k8s',(.*?)\)""", re.S)


def plural(kind: str) -> str:
    return kind.lower() + ("es" if kind.endswith("s") else "s")


def kinds_in(text: str) -> set[str]:
    return set(KIND.findall(text))


def template_kinds(name: str) -> set[str]:
    found = [p for p in ROLES.glob(f"*/templates/{name}")]
    assert found, f"template {name} not found"
    text = found[0].read_text()
    kinds = {k for k in re.findall(r"^kind: ([A-Z][A-Za-z]+)", text, re.M)}
    for included in re.findall(r"template', '([^']+\.j2)'", text):  # a template made of others
        kinds |= template_kinds(included)
    return kinds


def tasks(items: Any, context: str = ""):
    """Each task, with the text of what it may take ``item`` from: its loop, its vars and its blocks' vars."""
    for task in items or []:
        here = context + yaml.safe_dump({"loop": task.get("loop", ""), "vars": task.get("vars", {})})
        yield task, here
        for key in ("block", "rescue", "always"):
            yield from tasks(task.get(key), here)


def used() -> dict[str, set[str]]:
    """resource -> the verbs the roles use on it."""
    out: dict[str, set[str]] = {}

    def add(kinds: set[str], verbs: set[str], sub: str = "") -> None:
        for kind in kinds:
            out.setdefault(plural(kind) + sub, set()).update(verbs)

    files = {path: yaml.safe_load(path.read_text()) for path in sorted(ROLES.glob("*/tasks/*.yml"))}
    # facts a manifest is rendered into before a task applies it
    rendered: dict[str, set[str]] = {}
    for items in files.values():
        for task, _ in tasks(items):
            for fact, value in (task.get("ansible.builtin.set_fact") or {}).items():
                for name in re.findall(r"template', '([^']+\.j2)'", str(value)):
                    rendered.setdefault(fact, set()).update(template_kinds(name))

    for path, items in files.items():
        for task, context in tasks(items):
            text = yaml.safe_dump(task)
            for args in LOOKUP.findall(text):
                found = kinds_in(args) or kinds_in(context)
                assert found, f"{path}: a lookup whose kind is not named: {args}"
                add(found, {"get", "list"})
            module = next((k for k in task if k.startswith(("kubernetes.core.", "operator_sdk.util."))), None)
            if not module:
                continue
            args = task[module] or {}
            named = {str(args["kind"])} if isinstance(args.get("kind"), str) and "{{" not in args["kind"] else set()
            if not named and "{{ item.kind }}" in str(args.get("kind", "")):
                named = kinds_in(context)
            definition = args.get("definition")
            if isinstance(definition, dict) and definition.get("kind"):
                named.add(definition["kind"])
            elif definition:
                for name in re.findall(r"template', '([^']+\.j2)'", str(definition)):
                    named |= template_kinds(name)
                for fact in re.findall(r"\w+", str(definition)):
                    named |= rendered.get(fact, set())
            short = module.rsplit(".", 1)[1]
            if short == "k8s":
                assert named, f"{path}: task {task.get('name')!r}: no kind found"
                add(named, STATE_VERBS[args.get("state", "present")])
            elif short == "k8s_info":
                assert named, f"{path}: task {task.get('name')!r}: no kind found"
                add(named, {"get"} if args.get("name") else {"get", "list"})
            elif short == "k8s_exec":
                add({"Pod"}, {"create"}, "/exec")
            elif short == "k8s_status":
                add(named, {"get", "patch"}, "/status")
            elif short == "k8s_event":
                add({"Event"}, {"create"})
    return out


def granted() -> dict[str, set[str]]:
    role = yaml.safe_load((ROOT / "deploy" / "rbac" / "role.yaml").read_text())
    out: dict[str, set[str]] = {}
    for rule in role["rules"]:
        for resource in rule["resources"]:
            out.setdefault(resource, set()).update(rule["verbs"])
    return out


def test_every_verb_the_roles_use_is_granted() -> None:
    wanted, have = used(), granted()
    # the reading is not vacuous: what the leader and the backups do is among what was found
    assert {"create"} <= wanted["pods/exec"] and {"patch"} <= wanted["pods"] and "create" in wanted["volumesnapshots"]
    assert {"get", "list"} <= wanted["storageclasses"] and "get" in wanted["nodes"] and "create" in wanted["leases"]
    missing = {f"{resource}: {', '.join(sorted(verbs - have.get(resource, set())))}"
               for resource, verbs in wanted.items() if verbs - have.get(resource, set())}
    assert not missing, f"deploy/rbac/role.yaml does not grant what the roles use: {sorted(missing)}"
