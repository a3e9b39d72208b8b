"""The `playbook-operator` command: `run` (the operator) and `cluster` (the local control plane)."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "cluster":
        # The local control plane is development tooling; the runtime itself never imports it.
        from localcluster.cluster import main as cluster_main

        return cluster_main(argv[1:])
    print("usage: playbook-operator {run,cluster} ...", file=sys.stderr)
    return 2
