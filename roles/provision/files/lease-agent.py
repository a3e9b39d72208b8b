"""The Lease agent of a SampleDB server pod (a sidecar; Python's standard library only).

It reads the database's primary Lease with the pod's own ServiceAccount (which may read that one Lease and nothing
else) every LEASE_READ_SECONDS and, after each read that succeeds, writes ``<holder> <when the read was sent>`` to
$RUN_DIR/sampledb-lease, the time as /proc/uptime's first field (CLOCK_BOOTTIME: it never goes back, and it counts a
suspended node's time). A read that fails writes nothing, so the last good one ages, and says why in
$RUN_DIR/sampledb-lease-error (for the server's log). entrypoint.sh keeps a primary's server running only while a read
sent less than its term ago named it: a primary cut off from the API server stops taking writes within its term.
The API server is reached directly, never through a proxy from the environment.
"""

from __future__ import annotations

import json
import os
import signal
import ssl
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

ACCOUNT = Path(os.environ.get("SERVICE_ACCOUNT_DIR", "/var/run/secrets/kubernetes.io/serviceaccount"))


def uptime() -> float:
    return time.clock_gettime(time.CLOCK_BOOTTIME)


def lease_url() -> str:
    host = os.environ["KUBERNETES_SERVICE_HOST"]
    host = f"[{host}]" if ":" in host else host
    return (f"https://{host}:{os.environ.get('KUBERNETES_SERVICE_PORT', '443')}/apis/coordination.k8s.io/v1"
            f"/namespaces/{os.environ['POD_NAMESPACE']}/leases/{os.environ['LEASE_NAME']}")


def read_holder(opener: urllib.request.OpenerDirector, url: str, timeout: float) -> str:
    """The Lease's holder ('' when it names nobody); raises when it cannot be read."""
    token = (ACCOUNT / "token").read_text().strip()  # (read each time: the kubelet rotates it)
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}", "Accept": "application/json"})
    with opener.open(request, timeout=timeout) as response:
        return (json.load(response).get("spec") or {}).get("holderIdentity") or ""


def opener(context: ssl.SSLContext) -> urllib.request.OpenerDirector:
    return urllib.request.build_opener(urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=context))


def record(out: Path, holder: str, sent: float) -> None:
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(f"{holder or '-'} {sent:.2f}\n")
    tmp.replace(out)  # (one rename: the entrypoint never reads half a line)


def read_once(out: Path, read: Callable[[], str], failing: str) -> str:
    """One read: recorded, or why it failed (said once per kind of failure, and left for the server's log);
    returns the failure ('' when the read succeeded)."""
    sent = uptime()
    error = out.with_name(out.name + "-error")
    try:
        record(out, read(), sent)
    except Exception as exc:  # (any failure only ages the last good read: the agent itself must not end)
        why = f"{type(exc).__name__}: {getattr(exc, 'reason', None) or exc}"
        if why != failing:
            print(f"lease-agent: cannot read the Lease ({why})", file=sys.stderr, flush=True)
            try:
                error.write_text(why + "\n")
            except OSError:
                pass
        return why
    if failing:
        print("lease-agent: the Lease can be read again", file=sys.stderr, flush=True)
        error.unlink(missing_ok=True)
    return ""


def main() -> int:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    out = Path(os.environ.get("RUN_DIR", "/var/run/postgresql")) / "sampledb-lease"
    period = float(os.environ.get("LEASE_READ_SECONDS", "1"))
    timeout = float(os.environ.get("LEASE_READ_TIMEOUT_SECONDS", "2"))
    api = opener(ssl.create_default_context(cafile=str(ACCOUNT / "ca.crt")))
    url, failing = lease_url(), ""
    out.with_name(out.name + "-error").unlink(missing_ok=True)  # (an earlier agent's: this one has not failed yet)
    while True:
        began = uptime()
        failing = read_once(out, lambda: read_holder(api, url, timeout), failing)
        time.sleep(max(0.0, began + period - uptime()))


if __name__ == "__main__":
    sys.exit(main())
