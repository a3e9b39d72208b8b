"""kopf, imported without the kubernetes client.

kopf imports the official client whenever it is installed (``kopf/_cogs/helpers/thirdparty.py``), only to
recognise the client's model objects in what handlers return. This runtime never gives kopf such objects,
and the client with all its API classes and models is about 50 MB of the operator's memory. The client
stays installed for Ansible (kubernetes.core), which runs in other processes; ``apisession`` still uses
it, loading it only then, for kubeconfigs whose credentials need it (``exec`` and auth-provider plugins).
"""

from __future__ import annotations

import sys

if "kopf" not in sys.modules and "kubernetes" not in sys.modules:
    sys.modules["kubernetes"] = None  # type: ignore[assignment]  # makes `import kubernetes` an ImportError
    try:
        import kopf
    finally:
        del sys.modules["kubernetes"]

import kopf

__all__ = ["kopf"]
