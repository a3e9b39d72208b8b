"""Extra-vars exactly as the Go ansible-operator builds them."""

from __future__ import annotations

import pytest

from runner.config import GVK, Finalizer, Watch
from runner.params import build_extravars, to_snake


# The ansible-operator's own table (internal/ansible/paramconv/paramconv_test.go).
@pytest.mark.parametrize(("camel", "snake"), [
    ("var", "var"), ("888", "888"), ("k8s_var", "k8s_var"), ("_k8s_var", "_k8s_var"), ("k8s var", "k8s_var"),
    ("ThisShouldHaveUnderscores", "_this_should_have_underscores"), ("sizeK8sBuckets", "size_k8s_buckets"),
    ("_CanYou_Handle_mixedVars", "_can_you_handle_mixed_vars"), ("this_should_be_a_noop", "this_should_be_a_noop"),
    ("egressIPs", "egress_ips"), ("egressIPsEgress", "egress_ips_egress"), ("egressIPsegress", "egress_ips_egress"),
    ("IPsegress", "_ips_egress"), ("egressIP", "egress_ip"), ("egressIPEgress", "egress_ip_egress"),
    ("egressIPegress", "egress_ip_egress"), ("URLegressIPEgressHTTP", "url_egress_ip_egress_http"),
    ("URLsegressIPsEgressHTTPs", "_urls_egress_ips_egress_https"),
    ("storageClassName", "storage_class_name"), ("maxConnections", "max_connections"),
])
def test_to_snake_matches_upstream(camel: str, snake: str) -> None:
    assert to_snake(camel) == snake


OBJ = {
    "apiVersion": "cache.example-co.com/v1", "kind": "MemCached",
    "metadata": {"name": "m", "namespace": "ns", "uid": "u"},
    "spec": {"replicaCount": 2, "nested": {"innerKey": "{{ lookup('env', 'HOME') }}"}, "items": [{"someKey": 1}]},
}


def test_extravars_contract() -> None:
    w = Watch(GVK("cache.example-co.com", "v1", "MemCached"), vars={"replica_count": 5, "extra": "x"})
    ev = build_extravars(w, OBJ, finalizer_run=False)
    assert ev["ansible_operator_meta"] == {"name": "m", "namespace": "ns"}
    assert ev["_cache_example_co_com_memcached"] is OBJ
    assert ev["_cache_example_co_com_memcached_spec"] == OBJ["spec"]  # raw, not snake_cased
    assert ev["nested"] == {"inner_key": "{{ lookup('env', 'HOME') }}"}
    assert ev["items"] == [{"some_key": 1}]
    assert ev["replica_count"] == 5 and ev["extra"] == "x"  # watch vars win over spec keys


def test_finalizer_vars_only_on_finalizer_runs() -> None:
    w = Watch(GVK("g", "v1", "K"), finalizer=Finalizer("f", vars={"state": "absent"}))
    assert "state" not in build_extravars(w, OBJ, finalizer_run=False)
    assert build_extravars(w, OBJ, finalizer_run=True)["state"] == "absent"


def test_snake_case_off_and_mark_unsafe() -> None:
    w = Watch(GVK("g", "v1", "K"), snake_case_parameters=False, mark_unsafe=True)
    ev = build_extravars(w, OBJ, finalizer_run=False)
    assert ev["replicaCount"] == 2
    assert ev["nested"] == {"innerKey": {"__ansible_unsafe": "{{ lookup('env', 'HOME') }}"}}
    assert ev["_g_k"]["metadata"]["name"] == {"__ansible_unsafe": "m"}
    assert ev["ansible_operator_meta"] == {"name": "m", "namespace": "ns"}  # ours, never unsafe


def test_object_without_spec_gets_empty_spec() -> None:
    # upstream formats "_%v_%v" with the empty core group: two underscores
    ev = build_extravars(Watch(GVK("", "v1", "Secret")), {"metadata": {"name": "s"}}, finalizer_run=False)
    assert ev["__secret_spec"] == {} and ev["ansible_operator_meta"] == {"name": "s", "namespace": ""}
