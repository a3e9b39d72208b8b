"""The Lease agent of a SampleDB server pod (a sidecar; Python's standard library only).

It reads the database's primary Lease with the pod's own ServiceAccount (which may read that one Lease and nothing
else) every LEASE_READ_SECONDS and, after each read that succeeds, writes ``<holder> <when the read was sent>`` to
$RUN_DIR/sampledb-lease, the time as /proc/uptime's first field (CLOCK_BOOTTIME: it never goes back, and it counts a
suspended node's time). A read that fails writes nothing, so the last good one ages. entrypoint.sh keeps a primary's
server running only while a read sent less than its term ago named it: a primary cut off from the API server stops
taking writes within its term.
"""

from __future__ import annotations

import json
import os
import signal
import ssl
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

ACCOUNT = Path(os.environ.get("SERVICE_ACCOUNT_DIR", "/var/run/secrets/kubernetes.io/serviceaccount"))


def uptime() -> float:
    return time.clock_gettime(time.CLOCK_BOOTTIME)


def lease_url() -> str:
    host = os.environ["KUBERNETES_SERVICE_HOST"]
    host = f"[{host}]" if ":" in host else host
    return (f"https://{host}:{os.environ.get('KUBERNETES_SERVICE_PORT', '443')}/apis/coordination.k8s.io/v1"
            f"/namespaces/{os.environ['POD_NAMESPACE']}/leases/{os.environ['LEASE_NAME']}")


def read_holder(url: str, context: ssl.SSLContext, timeout: float) -> str:
    """The Lease's holder ('' when it names nobody); raises when it cannot be read."""
    token = (ACCOUNT / "token").read_text().strip()  # (read each time: the kubelet rotates it)
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}", "Accept": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout, context=context) as response:
        return (json.load(response).get("spec") or {}).get("holderIdentity") or ""


def record(out: Path, holder: str, sent: float) -> None:
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(f"{holder or '-'} {sent:.2f}\n")
    tmp.replace(out)  # (one rename: the entrypoint never reads half a line)


def main() -> int:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    out = Path(os.environ.get("RUN_DIR", "/var/run/postgresql")) / "sampledb-lease"
    period = float(os.environ.get("LEASE_READ_SECONDS", "1"))
    timeout = float(os.environ.get("LEASE_READ_TIMEOUT_SECONDS", "2"))
    context = ssl.create_default_context(cafile=str(ACCOUNT / "ca.crt"))
    url, failing = lease_url(), ""
    while True:
        sent = uptime()
        try:
            record(out, read_holder(url, context, timeout), sent)
            if failing:
                print("lease-agent: the Lease can be read again", file=sys.stderr, flush=True)
            failing = ""
        except (OSError, ValueError, urllib.error.URLError) as exc:
            why = f"{type(exc).__name__}: {getattr(exc, 'reason', None) or exc}"
            if why != failing:  # (once per kind of failure, not every second)
                print(f"lease-agent: cannot read the Lease ({why})", file=sys.stderr, flush=True)
            failing = why
        time.sleep(max(0.0, sent + period - uptime()))


if __name__ == "__main__":
    sys.exit(main())
