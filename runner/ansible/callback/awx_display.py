# Replaces ansible-runner's awx_display stdout callback (found first on ANSIBLE_CALLBACK_PLUGINS) with
# one that removes Secret data from every task result before it is printed or written as a job event.
# Callbacks get their own copy of the result in ansible-core 2.19, so registered variables keep the data.
from __future__ import annotations

DOCUMENTATION = """
    name: awx_display
    short_description: ansible-runner's event callback, with Secret data redacted
    description:
        - Wraps ansible_runner's awx_display; see playbook-operator's runner/ansible/redact.py.
    type: stdout
    extends_documentation_fragment:
      - default_callback
"""

from ansible_runner.display_callback.callback.awx_display import CallbackModule as _RunnerDisplay

from runner.ansible.redact import redact_result

_RESULT_HOOKS = (
    "v2_runner_on_ok", "v2_runner_on_failed", "v2_runner_on_unreachable", "v2_runner_on_skipped",
    "v2_runner_on_async_ok", "v2_runner_on_async_failed", "v2_runner_on_async_poll",
    "v2_runner_item_on_ok", "v2_runner_item_on_failed", "v2_runner_item_on_skipped",
    "v2_runner_retry", "v2_runner_on_file_diff",
)


def _redacting(name):
    def hook(self, result, *args, **kwargs):
        data = result._result
        cleaned = redact_result(dict(data))
        data.clear()
        data.update(cleaned)
        return getattr(_RunnerDisplay, name)(self, result, *args, **kwargs)

    hook.__name__ = name
    return hook


class CallbackModule(_RunnerDisplay):
    CALLBACK_NAME = "awx_display"


for _name in _RESULT_HOOKS:
    setattr(CallbackModule, _name, _redacting(_name))
