"""The forkserver's kubernetes client loads its generated names on first use, and offers the same ones (an
eager client, 33.1.0 in the default venv, is made lazy; a lazy one, 37 in the 2.19 venv, is left as it is)."""

from __future__ import annotations

import json
import subprocess
import sys

SURVEY = """
import importlib, json, sys
lazy = sys.argv[1] == "lazy"
if lazy:
    import runner.execution.lazy_client
import kubernetes.client
loaded_at_import = sum(m.startswith("kubernetes.client.models.") for m in sys.modules)
out = {"loaded_at_import": loaded_at_import}
for pkg in sys.argv[3].split(","):
    mod = importlib.import_module(pkg)
    names = set(getattr(mod, "__all__", None) or [n for n in vars(mod) if not n.startswith("_")])
    if lazy:  # and each name of the unchanged client, as an attribute (submodules included)
        names |= set(json.loads(sys.argv[2])[pkg])
    described = {}
    for n in sorted(names):
        obj = getattr(mod, n)
        described[n] = [type(obj).__name__, getattr(obj, "__module__", None), getattr(obj, "__qualname__", None),
                        getattr(obj, "__name__", None)]
    out[pkg] = described
from kubernetes.client import *  # noqa
out["star"] = "V1Pod" in dir() and "CoreV1Api" in dir() and "ApiClient" in dir()
from kubernetes.client.apis import core_v1_api  # as k8s_exec does
out["exec"] = core_v1_api.CoreV1Api.__module__
out["same"] = kubernetes.client.V1Pod is kubernetes.client.models.V1Pod is \\
    importlib.import_module("kubernetes.client.models.v1_pod").V1Pod
print(json.dumps(out))
"""


PACKAGES = ("kubernetes.client", "kubernetes.client.api", "kubernetes.client.models", "kubernetes.client.apis")


def survey(mode: str, names: dict | None = None) -> dict:
    return json.loads(subprocess.run([sys.executable, "-c", SURVEY, mode, json.dumps(names or {}), ",".join(PACKAGES)],
                                     capture_output=True, text=True, check=True).stdout)


def test_the_lazy_client_has_the_eager_clients_names_and_objects() -> None:
    eager = survey("eager")
    lazy = survey("lazy", {p: list(eager[p]) for p in PACKAGES})
    # kubernetes >= 35 loads its names on use itself (its models are not imported with it): left as it is
    assert lazy["loaded_at_import"] == 0
    for pkg in PACKAGES:  # apis: the deprecated alias kubernetes.core's k8s_exec imports core_v1_api from
        assert len(eager[pkg]) > 50
        assert {n: lazy[pkg][n] for n in eager[pkg]} == eager[pkg], pkg
    assert lazy["star"] and lazy["same"] and eager["star"] and eager["same"]
    assert lazy["exec"] == eager["exec"] == "kubernetes.client.api.core_v1_api"
