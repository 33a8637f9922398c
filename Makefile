# tooladapter: the two commands that matter are `make demo` and `make test`.
SHELL := /bin/bash
.DEFAULT_GOAL := help

ROOT      := $(abspath .)
VENV      ?= $(ROOT)/.venv
PY        := $(VENV)/bin/python
STAMP     := $(VENV)/.installed-$(shell sha256sum pyproject.toml 2>/dev/null | cut -c1-12)
# The cluster of KUBECONFIG when one is given; otherwise the local one `make cluster-up` builds.
LOCAL_KUBECONFIG := $(ROOT)/.cluster/kubeconfig
export KUBECONFIG ?= $(LOCAL_KUBECONFIG)
export PATH := $(ROOT)/.cluster/bin:$(VENV)/bin:$(PATH)
export PYTHONUNBUFFERED := 1

include hack/cluster.mk

.PHONY: help venv lint unit crds crds-check install uninstall run demo test integration bench chaos s3-server otel-collector promtool

help:
	@echo "make test       set up everything on a fresh machine, then run all tests"
	@echo "make demo       local cluster, operator, example tools, calls as an agent, receipts"
	@echo "make cluster-up | cluster-down | cluster-status"
	@echo "make install    CRDs, RBAC, admission policies into the cluster of KUBECONFIG"
	@echo "make run        the operator in the foreground against KUBECONFIG"
	@echo "make crds       regenerate crds/ from the models"
	@echo "make bench      benchmarks (never part of make test)"
	@echo "make chaos      exactly once and never stuck under faults (never part of make test)"
	@echo "make s3-server  build the S3-compatible test server (SeaweedFS) into the cache"
	@echo "make otel-collector  build the OTLP receiver the tracing tests use, into the cache"

$(STAMP): pyproject.toml
	@command -v python3 >/dev/null || { apt-get update -qq && apt-get install -y -qq python3 python3-venv; }
	@test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q -U pip
	$(PY) -m pip install -q -e '.[dev]'
	@rm -f $(VENV)/.installed-*; touch $@

venv: $(STAMP)

lint: venv
	$(VENV)/bin/ruff check operator tests hack
	$(VENV)/bin/ruff format --check operator tests hack
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

# promtool checks and unit-tests the alert rules (hack/monitoring/): Debian's prometheus
# package ships it (no service is started where none runs).
promtool:
	@command -v promtool >/dev/null || { apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus; }

unit: venv promtool
	$(VENV)/bin/pytest -q tests/unit

crds: venv
	$(PY) -m tooladapter.crdgen crds/
	$(PY) hack/sync_chart.py

crds-check: venv
	$(PY) -m tooladapter.crdgen --check crds/

install: venv
	kubectl apply --server-side --force-conflicts -f crds/
	kubectl wait --for=condition=Established --timeout=60s -f crds/
	kubectl apply --server-side --force-conflicts -k manifests/

uninstall:
	-kubectl delete -k manifests/ --ignore-not-found
	-kubectl delete -f crds/ --ignore-not-found

run: venv
	$(PY) -m tooladapter run

demo: venv
	@if [ "$(KUBECONFIG)" = "$(LOCAL_KUBECONFIG)" ]; then $(MAKE) --no-print-directory cluster-up; fi
	$(MAKE) --no-print-directory install
	$(PY) hack/demo.py

# The S3-compatible server the s3 artifact tests start (built once into ~/.cache/tooladapter).
s3-server:
	hack/s3/build.sh >/dev/null

# The OpenTelemetry Collector (OTLP receiver, file exporter) the tracing tests export to,
# built once from hack/otel/go.mod into ~/.cache/tooladapter/bin.
otel-collector:
	hack/otel/build.sh >/dev/null

integration: venv s3-server otel-collector
	TOOLADAPTER_REQUIRE_CLUSTER=1 $(VENV)/bin/pytest -q -m "not cluster_down" tests/cluster tests/integration

test: lint unit
	@if [ "$(KUBECONFIG)" = "$(LOCAL_KUBECONFIG)" ]; then $(MAKE) --no-print-directory cluster-up; fi
	$(MAKE) --no-print-directory install
	$(MAKE) --no-print-directory integration
	@if [ "$(KUBECONFIG)" = "$(LOCAL_KUBECONFIG)" ]; then \
	  $(VENV)/bin/pytest -q -m cluster_down tests/cluster; fi

bench: venv
	@if [ "$(KUBECONFIG)" = "$(LOCAL_KUBECONFIG)" ]; then $(MAKE) --no-print-directory cluster-up; fi
	$(MAKE) --no-print-directory install
	PYTHONPATH=$(ROOT)/hack$${PYTHONPATH:+:$$PYTHONPATH} $(PY) -m bench

chaos: venv
	@if [ "$(KUBECONFIG)" = "$(LOCAL_KUBECONFIG)" ]; then $(MAKE) --no-print-directory cluster-up; fi
	$(MAKE) --no-print-directory install
	PYTHONPATH=$(ROOT)/hack$${PYTHONPATH:+:$$PYTHONPATH} $(PY) -m chaos
