"""playbook-operator: runs Ansible roles as a Kubernetes operator (Operator SDK ansible-operator compatible)."""

__version__ = "0.1.0"
