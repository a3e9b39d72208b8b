"""How a role runs. One interface (``Executor``), two implementations:

- ``cold``: ansible-runner starts ``ansible-playbook`` for every run (the reference path);
- ``warm``: a pre-imported Ansible worker forks per run (the fast path, same artifacts and events).
"""

from .base import Executor, RunRequest, RunResult

__all__ = ["Executor", "RunRequest", "RunResult"]
