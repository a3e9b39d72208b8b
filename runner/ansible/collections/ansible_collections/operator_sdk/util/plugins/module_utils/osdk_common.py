# Shared by the operator_sdk.util modules: connection options and the API client.
from __future__ import annotations

import os

AUTH_ARG_SPEC = {
    "kubeconfig": {"type": "path"},
    "context": {"type": "str"},
    "host": {"type": "str"},
    "api_key": {"type": "str", "no_log": True},
    "username": {"type": "str"},
    "password": {"type": "str", "no_log": True},
    "validate_certs": {"type": "bool", "aliases": ["verify_ssl"]},
    "ca_cert": {"type": "path", "aliases": ["ssl_ca_cert"]},
    "client_cert": {"type": "path", "aliases": ["cert_file"]},
    "client_key": {"type": "path", "aliases": ["key_file"]},
    "proxy": {"type": "str"},
    "persist_config": {"type": "bool"},
}

NAME_ARG_SPEC = {
    "kind": {"type": "str", "required": True},
    "name": {"type": "str", "required": True},
    "namespace": {"type": "str"},
    "api_version": {"type": "str", "default": "v1", "aliases": ["api", "version"]},
}


def _param(module, name):
    value = module.params.get(name)
    if value is None:
        value = os.environ.get("K8S_AUTH_" + name.upper())
        if value is not None and AUTH_ARG_SPEC[name].get("type") == "bool":
            value = value.lower() not in ("0", "false", "no")
    return value


def api_client(module):
    """A kubernetes ApiClient from the module's options, K8S_AUTH_* variables, KUBECONFIG or in-cluster."""
    try:
        from kubernetes import client, config
    except ImportError:
        module.fail_json(msg="the kubernetes Python client is required (pip install kubernetes)")
    cfg = client.Configuration()
    host, api_key = _param(module, "host"), _param(module, "api_key")
    try:
        if host and (api_key or (_param(module, "username") and _param(module, "password"))):
            cfg.host = host
        else:
            kubeconfig = _param(module, "kubeconfig") or os.environ.get("KUBECONFIG")
            context = _param(module, "context")
            if kubeconfig or context:
                config.load_kube_config(config_file=kubeconfig, context=context, client_configuration=cfg)
            else:
                try:
                    config.load_incluster_config(client_configuration=cfg)
                except config.ConfigException:
                    config.load_kube_config(client_configuration=cfg)
    except Exception as exc:
        module.fail_json(msg="Failed to load kubeconfig due to %s" % exc)
    if host:
        cfg.host = host
    if api_key:
        cfg.api_key = {"authorization": "Bearer " + api_key}
    for attr, name in (("username", "username"), ("password", "password"), ("ssl_ca_cert", "ca_cert"),
                       ("cert_file", "client_cert"), ("key_file", "client_key"), ("proxy", "proxy")):
        value = _param(module, name)
        if value:
            setattr(cfg, attr, value)
    verify = _param(module, "validate_certs")
    if verify is not None:
        cfg.verify_ssl = verify
    return client.ApiClient(cfg)


def find_resource(dyn, kind, api_version):
    """Looks a kind up by kind, plural, singular name or short name (as upstream does)."""
    from kubernetes.dynamic.exceptions import ResourceNotFoundError, ResourceNotUniqueError

    for attribute in ("kind", "name", "singular_name"):
        try:
            return dyn.resources.get(**{"api_version": api_version, attribute: kind})
        except (ResourceNotFoundError, ResourceNotUniqueError):
            pass
    try:
        return dyn.resources.get(api_version=api_version, short_names=[kind])
    except (ResourceNotFoundError, ResourceNotUniqueError):
        return None


class ApiError(Exception):
    def __init__(self, status, reason, body):
        super().__init__("%s %s: %s" % (status, reason, body))
        self.status, self.reason, self.body = status, reason, body


def request(api, method, path, body=None, content_type="application/json"):
    import json

    from kubernetes.client.exceptions import ApiException

    headers = {"Accept": "application/json"}
    if body is not None:
        headers["Content-Type"] = content_type
    try:
        req = api.param_serialize(method, path, header_params=headers, body=body, auth_settings=["BearerToken"])
        resp = api.call_api(*req)
        resp.read()
        if not 200 <= resp.status <= 299:
            api.response_deserialize(resp, {})
    except ApiException as exc:
        raise ApiError(exc.status, exc.reason, exc.body) from None
    return json.loads(resp.data) if resp.data else None


def discover(api, api_version, kind):
    """(plural, namespaced, has_status_subresource) of a kind, by kind, plural, singular or short name."""
    base = "/api/" + api_version if "/" not in api_version else "/apis/" + api_version
    listing = request(api, "GET", base)
    found = None
    for r in listing.get("resources", []):
        if "/" in r["name"]:
            continue
        names = [r.get("kind"), r["name"], r.get("singularName"), *list(r.get("shortNames") or [])]
        if kind in names or kind.lower() in [n.lower() for n in names if n]:
            found = r
            if r.get("kind") == kind:
                break
    if found is None:
        return None
    has_status = any(r["name"] == found["name"] + "/status" for r in listing.get("resources", []))
    return found["name"], bool(found.get("namespaced")), has_status, base


def object_path(base, plural, namespaced, namespace, name, subresource=None):
    path = base + ("/namespaces/%s" % namespace if namespaced and namespace else "") + "/" + plural
    if name:
        path += "/" + name
    if subresource:
        path += "/" + subresource
    return path
