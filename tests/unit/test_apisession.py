"""The aiohttp session (the proxy's and the dependent watches' upstream) sends the operator's credentials."""

from __future__ import annotations

from pathlib import Path

import yaml
from kubernetes import client, config

from runner.apisession import ApiSession


def configuration(tmp_path: Path, user: dict) -> client.Configuration:
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "k", "cluster": {"server": "https://127.0.0.1:6443", "insecure-skip-tls-verify": True}}],
        "users": [{"name": "u", "user": user}], "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}]}))
    cfg = client.Configuration()
    config.load_kube_config(config_file=str(path), client_configuration=cfg)
    return cfg


def test_a_service_account_token_is_sent(tmp_path: Path) -> None:
    headers = ApiSession(configuration(tmp_path, {"token": "sa-token"})).auth_headers()
    assert headers == {"authorization": "Bearer sa-token"}


def test_basic_auth_is_sent(tmp_path: Path) -> None:
    headers = ApiSession(configuration(tmp_path, {"username": "admin", "password": "pw"})).auth_headers()
    assert headers == {"authorization": "Basic YWRtaW46cHc="}


def test_client_certificates_need_no_header(tmp_path: Path) -> None:
    assert ApiSession(client.Configuration()).auth_headers() == {}
