"""The operator's credentials, read as kubectl reads them, are what its own requests send."""

from __future__ import annotations

import base64
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from runner.apisession import ApiSession, load_connection


def kubeconfig(tmp_path: Path, user: dict, cluster: dict | None = None) -> Path:
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "k", "cluster": cluster or {"server": "https://127.0.0.1:6443",
                                                          "insecure-skip-tls-verify": True}}],
        "users": [{"name": "u", "user": user}], "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}]}))
    return path


@pytest.fixture
def session_for(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    def make(user: dict, cluster: dict | None = None) -> ApiSession:
        monkeypatch.setenv("KUBECONFIG", str(kubeconfig(tmp_path, user, cluster)))
        return ApiSession(load_connection())
    return make


def test_a_token_is_sent(session_for) -> None:
    assert session_for({"token": "sa-token"}).auth_headers() == {"Authorization": "Bearer sa-token"}


def test_basic_auth_is_sent(session_for) -> None:
    headers = session_for({"username": "admin", "password": "pw"}).auth_headers()
    assert headers == {"Authorization": "Basic YWRtaW46cHc="}


def test_client_certificates_need_no_header(session_for) -> None:
    session = session_for({"client-certificate-data": base64.b64encode(b"cert").decode(),
                           "client-key-data": base64.b64encode(b"key").decode()})
    assert session.auth_headers() == {}
    assert session.base == "https://127.0.0.1:6443"


def test_relative_file_names_are_read_beside_the_kubeconfig(session_for, tmp_path: Path) -> None:
    info = session_for({"client-certificate": "pki/admin.crt", "client-key": "pki/admin.key"},
                       {"server": "https://127.0.0.1:6443/", "certificate-authority": "pki/ca.crt"}).connection
    assert (info.ca_path, info.certificate_path, info.private_key_path) == (
        str(tmp_path / "pki/ca.crt"), str(tmp_path / "pki/admin.crt"), str(tmp_path / "pki/admin.key"))


def test_no_kubeconfig_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(Exception, match=r"no credentials for the API server.*set KUBECONFIG"):
        load_connection()


def test_the_operator_process_does_not_load_the_kubernetes_client() -> None:
    """kopf would import it (about 50 MB) if let; Ansible's processes still use it."""
    out = subprocess.run([sys.executable, "-c", "import sys, runner.cli, runner.manager; "
                          "print(sorted(m for m in sys.modules if m.split('.')[0] == 'kubernetes'))"],
                         capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_a_kubeconfig_without_its_context_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = kubeconfig(tmp_path, {"token": "t"})
    path.write_text(path.read_text().replace("current-context: c", "current-context: elsewhere"))
    monkeypatch.setenv("KUBECONFIG", str(path))
    with pytest.raises(Exception, match=f"could not read the kubeconfig {path}: KeyError: 'elsewhere'"):
        load_connection()


def test_writes_go_out_only_while_the_fence_allows_them() -> None:
    """A write is checked when it has its connection, the last moment before it is sent; reads, and the
    writes marked unfenced (the Lease's own), always go."""
    import asyncio

    from aiohttp import web

    from runner.apisession import Fenced
    from runner.kopf_without_client import kopf

    async def go() -> list[str]:
        arrived: list[str] = []

        async def handler(request: web.Request) -> web.Response:
            arrived.append(f"{request.method} {request.path}")
            return web.json_response({})

        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", handler)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        api = ApiSession(kopf.ConnectionInfo(server=f"http://127.0.0.1:{port}", token="t"))
        leading = True
        api.fence = lambda: leading
        try:
            async with api.request("PATCH", "/while-leading"):
                pass
            leading = False
            with pytest.raises(Fenced):
                async with api.request("POST", "/after-the-lease"):
                    pass
            async with api.request("GET", "/a-read"):
                pass
            async with api.request("PUT", "/the-lease", fenced=False):
                pass
        finally:
            await api.close()
            await runner.cleanup()
        return arrived

    assert asyncio.run(go()) == ["PATCH /while-leading", "GET /a-read", "PUT /the-lease"]
