"""The roles' manifest templates are YAML read back with from_yaml: a value that is a whole expression must be quoted
by to_json where a user's string lands, or a SampleDB named ``off`` (or ``yes``, or a user ``no``) comes back as a
boolean, and a password of digits as a number."""

from __future__ import annotations

import re

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
