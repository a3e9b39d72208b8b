"""/metrics behind --metrics-secure and --metrics-require-rbac, as a scraper sees it (the API server's reviews
faked: who each token is, and whether that user may GET /metrics)."""

from __future__ import annotations

import asyncio
import ssl
from typing import Any

import aiohttp

from runner.server import Endpoints, MetricsSecurity

USERS = {"prometheus-token": ("system:serviceaccount:monitoring:prometheus", True),
         "intruder-token": ("system:serviceaccount:default:intruder", False)}


class FakeReviewer:
    """The two reviews of controller-runtime's metrics filter, answered from USERS."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, dict[str, Any]]] = []

    async def request(self, method: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.requests.append((path, body))
        if path.endswith("/tokenreviews"):
            known = USERS.get(body["spec"]["token"])
            return {"status": {"authenticated": bool(known),
                               "user": {"username": known[0], "groups": ["system:serviceaccounts"]} if known else {}}}
        allowed = any(u == body["spec"]["user"] and ok for u, ok in USERS.values())
        assert body["spec"]["nonResourceAttributes"] == {"path": "/metrics", "verb": "get"}
        return {"status": {"allowed": allowed}}


async def scrape(endpoints: Endpoints, token: str | None, scheme: str = "https") -> tuple[int, str]:
    insecure = ssl.create_default_context()
    insecure.check_hostname = False
    insecure.verify_mode = ssl.CERT_NONE  # a self-signed certificate, as controller-runtime's
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with aiohttp.ClientSession() as http, http.get(
            f"{scheme}://127.0.0.1:{endpoints.ports['metrics']}/metrics", headers=headers,
            ssl=insecure if scheme == "https" else False) as resp:
        return resp.status, await resp.text()


def test_metrics_over_https_for_allowed_tokens_only() -> None:
    async def go() -> tuple[list[tuple[int, str]], FakeReviewer]:
        reviewer = FakeReviewer()
        endpoints = Endpoints("127.0.0.1:0", "127.0.0.1:0", lambda: True,
                              MetricsSecurity(secure=True, reviewer=reviewer))  # type: ignore[arg-type]
        await endpoints.start()
        try:
            got = [await scrape(endpoints, token) for token in
                   (None, "forged-token", "intruder-token", "prometheus-token", "prometheus-token")]
        finally:
            await endpoints.stop()
        return got, reviewer

    got, reviewer = asyncio.run(go())
    assert [status for status, _ in got] == [401, 401, 403, 200, 200]
    assert "user=system:serviceaccount:default:intruder" in got[2][1]
    assert got[3][1].startswith("# HELP")  # the exposition format
    # the second scrape with the same token was answered from the kept review
    assert sum(path.endswith("/tokenreviews") for path, _ in reviewer.requests) == 3


def test_plain_http_metrics_ask_no_token() -> None:
    async def go() -> int:
        endpoints = Endpoints("127.0.0.1:0", "127.0.0.1:0", lambda: True)
        await endpoints.start()
        try:
            return (await scrape(endpoints, None, "http"))[0]
        finally:
            await endpoints.stop()

    assert asyncio.run(go()) == 200


def test_made_up_tokens_cost_a_bounded_memory() -> None:
    async def go() -> int:
        security = MetricsSecurity(secure=True, reviewer=FakeReviewer(), max_seen=50)  # type: ignore[arg-type]
        endpoints = Endpoints("127.0.0.1:0", "127.0.0.1:0", lambda: True, security)
        await endpoints.start()
        try:
            for i in range(120):
                await scrape(endpoints, f"made-up-{i}")
        finally:
            await endpoints.stop()
        return len(security._seen)

    assert asyncio.run(go()) <= 50
