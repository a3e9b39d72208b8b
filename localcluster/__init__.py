"""A real Kubernetes control plane on loopback for development and tests.

Built from the Go module proxy (wrapper modules under ``gomod/``) and cached per version. The operator
runtime (``runner``) never imports this package; only the ``cluster`` sub-command and the test harness do.
"""
