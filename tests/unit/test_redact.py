"""Secret data never reaches stdout, job events or logs."""

from __future__ import annotations

from runner.ansible.redact import REDACTED, redact_result


def test_secret_objects_anywhere_in_a_result() -> None:
    res = {"changed": True,
           "result": {"kind": "Secret", "metadata": {"name": "s"}, "data": {"password": "c2VjcmV0"}},
           "diff": {"before": {"kind": "Secret", "stringData": {"password": "secret"}}},
           "invocation": {"module_args": {"definition": {"kind": "Secret", "stringData": {"password": "secret"}}}}}
    out = redact_result(res)
    assert "c2VjcmV0" not in repr(out) and "secret" not in repr(out).replace("Secret", "")
    assert out["result"]["data"] == {"password": REDACTED}
    assert res["result"]["data"]["password"] == "c2VjcmV0"  # the input is not modified


def test_listed_secrets_without_kind_and_yaml_definitions() -> None:
    listed = {"resources": [{"metadata": {"name": "a"}, "type": "Opaque", "data": {"k": "dmFs"}}],
              "invocation": {"module_args": {"kind": "Secret"}}}
    assert redact_result(listed)["resources"][0]["data"] == {"k": REDACTED}
    yaml_def = {"invocation": {"module_args": {"definition": "kind: Secret\nstringData: {p: hunter2}\n"}}}
    assert "hunter2" not in repr(redact_result(yaml_def))


def test_configmaps_untouched() -> None:
    cm = {"result": {"kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"k": "v"}}}
    assert redact_result(cm) == cm
