"""The kubernetes client's generated packages, with their names loaded when first used.

``kubernetes.client``, ``kubernetes.client.api`` and ``kubernetes.client.models`` import every one of the
client's API classes and models in their ``__init__`` (some 60 API modules and 700 models: about 40 MB in
the warm executor's forkserver, which preloads the client for kubernetes.core). kubernetes.core's modules and
lookup use a handful of them: the dynamic client reads JSON, not models. Here each of those packages runs its
own ``__init__`` without its ``from <package>.<module> import <Name>`` lines, and a name is imported from its
module on first use, so everything the client offers is still there, with the same objects.

Imported by the forkserver before anything imports the client (``warm.PRELOAD``).
"""

from __future__ import annotations

import ast
import importlib
import importlib.abc
import importlib.machinery
import sys
import types
from collections.abc import Sequence

# kubernetes.client.apis is the client's deprecated name for kubernetes.client.api (a star import of it, which
# kubernetes.core's k8s_exec still imports from): its names come from the lazy api package on use.
PACKAGES = ("kubernetes.client", "kubernetes.client.api", "kubernetes.client.models", "kubernetes.client.apis")


class _LazyNamesLoader(importlib.abc.Loader):
    def __init__(self, spec: importlib.machinery.ModuleSpec) -> None:
        self.spec = spec

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:
        return None

    def exec_module(self, module: types.ModuleType) -> None:
        name = module.__name__
        assert self.spec.origin is not None
        tree = ast.parse(open(self.spec.origin, encoding="utf-8").read(), self.spec.origin)
        lazy: dict[str, str] = {}
        star: list[str] = []  # packages whose every name this one offers
        body = []
        for node in tree.body:
            source = node.module or "" if isinstance(node, ast.ImportFrom) and node.level == 0 else ""
            if source.startswith(name + ".") and all(a.name != "*" for a in node.names):
                lazy.update({a.asname or a.name: f"{source}:{a.name}" for a in node.names})
            elif source in PACKAGES and [a.name for a in node.names] == ["*"]:
                star.append(source)
            else:
                body.append(node)
        tree.body = body
        exec(compile(tree, self.spec.origin, "exec"), module.__dict__)
        if not lazy and not star:
            return  # already lazy (clients from 35 on load their names on use themselves): left as it is

        def __getattr__(attr: str) -> object:
            where = lazy.get(attr)
            if where is not None:
                source, _, real = where.partition(":")
                value = getattr(importlib.import_module(source), real)
            elif star and not attr.startswith("__"):
                value = getattr(importlib.import_module(star[0]), attr)  # raises AttributeError as it would
            elif not attr.startswith("__"):
                # a submodule, as the eager __init__ left each one it imported from as an attribute
                try:
                    value = importlib.import_module(f"{name}.{attr}")
                except ModuleNotFoundError as exc:
                    if exc.name != f"{name}.{attr}":
                        raise
                    raise AttributeError(f"module {name!r} has no attribute {attr!r}") from None
            else:
                raise AttributeError(f"module {name!r} has no attribute {attr!r}")
            setattr(module, attr, value)
            return value

        module.__getattr__ = __getattr__  # type: ignore[attr-defined]
        # `from kubernetes.client import *` gets every name, as from the client's own __init__
        if "__all__" not in module.__dict__:
            names = [n for s in star for n in getattr(importlib.import_module(s), "__all__", ())]
            module.__all__ = [n for n in module.__dict__ if not n.startswith("_")] + list(lazy) + names  # type: ignore[attr-defined]


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: types.ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname not in PACKAGES:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.origin is None or not spec.origin.endswith("__init__.py"):
            return spec
        spec.loader = _LazyNamesLoader(spec)
        return spec


def install() -> None:
    if not any(isinstance(f, _Finder) for f in sys.meta_path) and not any(p in sys.modules for p in PACKAGES):
        sys.meta_path.insert(0, _Finder())


install()
