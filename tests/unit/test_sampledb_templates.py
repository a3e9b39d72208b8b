"""The roles' manifest templates are YAML read back with from_yaml: a value that is a whole expression must be quoted
by to_json where a user's string lands, or a SampleDB named ``off`` (or ``yes``, or a user ``no``) comes back as a
boolean, and a password of digits as a number."""

from __future__ import annotations

import json
import re

import jinja2
import yaml

from tests.operator import ROOT

STRING_KEYS = ("name", "namespace", "username", "password", "superuser-password", "replication-password",
               "storageClassName")
BARE = re.compile(r"\s*-?\s*(?P<key>[\w./-]+): \{\{ (?P<expr>[^}]*) \}\}\s*")


def test_every_string_a_user_gives_is_quoted_in_the_manifests() -> None:
    bare = []
    for template in sorted((ROOT / "roles").glob("*/templates/*.j2")):
        for number, line in enumerate(template.read_text().splitlines(), 1):
            m = BARE.fullmatch(line)
            if m and m["key"] in STRING_KEYS and not m["expr"].rstrip().endswith("to_json"):
                bare.append(f"{template.relative_to(ROOT)}:{number}: {line.strip()}")
    assert bare == [], "\n".join(bare)


def _render(template: str, **variables: object) -> list[dict]:
    env = jinja2.Environment(undefined=jinja2.StrictUndefined)
    env.filters.update(to_json=json.dumps, combine=lambda a, b: {**a, **b})
    text = env.from_string((ROOT / "roles" / template).read_text()).render(**variables)
    return list(yaml.safe_load_all(text))


def test_a_drain_may_evict_one_replica_at_a_time() -> None:
    """The replicas' budget counts only the replicas (minAvailable): with maxUnavailable the disruption controller
    would expect every pod of the StatefulSet, the primary among them, and allow no replica's eviction at all."""
    for servers, replicas_left in ((2, 0), (3, 1), (5, 3)):
        primary, replicas = _render("provision/templates/pdb.yaml.j2", sdb_name="db", sdb_selector={"app": "db"},
                                    role_label="role", replicas=servers, pdb_max_unavailable=1)
        assert primary["spec"] == {"minAvailable": 1, "selector": {"matchLabels": {"app": "db", "role": "primary"}}}
        assert replicas["spec"] == {"minAvailable": replicas_left,
                                    "selector": {"matchLabels": {"app": "db", "role": "replica"}}}
