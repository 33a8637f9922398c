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

.PHONY: help venv lint docs-reference unit crds crds-check install uninstall run demo test integration bench chaos s3-server \
	deploy undeploy deploy-test image image-push skopeo browser otel-collector oauth-server promtool helm \
	mcp-ts-client

# `make deploy`: the Helm release (charts/tooladapter) in the cluster of KUBECONFIG.
HELM              ?= helm
DEPLOY_RELEASE    ?= tooladapter
DEPLOY_NAMESPACE  ?= tooladapter-system
# Further `helm upgrade` flags, e.g. DEPLOY_ARGS="--set replicas=3 -f my-values.yaml".
DEPLOY_ARGS       ?=

help:
	@echo "make test       set up everything on a fresh machine, then run all tests"
	@echo "make demo       local cluster, operator, six governed calls in one screenful, receipts in .demo/"
	@echo "make cluster-up | cluster-down | cluster-status"
	@echo "make install    CRDs, RBAC, admission policies into the cluster of KUBECONFIG"
	@echo "make run        the operator (and its egress proxy) in the foreground against KUBECONFIG"
	@echo "make deploy     the operator in-cluster with Helm (2 replicas); undeploy removes it"
	@echo "make crds       regenerate crds/ from the models"
	@echo "make image      operator and sandbox images without Docker (loaded into the local cluster)"
	@echo "make image-push REGISTRY=host:port  the same images pushed to a registry (skopeo), tagged with the chart's appVersion"
	@echo "make bench      benchmarks (never part of make test)"
	@echo "make chaos      exactly once and never stuck under faults (never part of make test)"
	@echo "make s3-server  build the S3-compatible test server (SeaweedFS) into the cache"
	@echo "make otel-collector  build the OTLP receiver the tracing tests use, into the cache"
	@echo "make oauth-server    build the OAuth server the minted-credential tests use, into the cache"
	@echo "make promtool | browser  install Debian's prometheus (promtool) / chromium when missing"

$(STAMP): pyproject.toml
	@command -v python3 >/dev/null || { apt-get update -qq && apt-get install -y -qq python3 python3-venv; }
	@test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q -U pip
	$(PY) -m pip install -q -e '.[dev]'
	@rm -f $(VENV)/.installed-*; touch $@

venv: $(STAMP)

# mypy twice: the operator strictly, then the tests less so (the tests.* override in
# pyproject.toml). tests/integration and tests/deploy are not in it yet: they read the
# Kubernetes client's objects, whose every field is typed Optional.
lint: venv
	$(VENV)/bin/ruff check operator tests hack
	$(VENV)/bin/ruff format --check operator tests hack
	$(VENV)/bin/mypy
	$(VENV)/bin/mypy tests
	$(VENV)/bin/lint-imports
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet

# docs/reference/ from the code (models, settings, CLI, OpenAPI, metrics, exit codes, chart
# values); tests/unit/packaging/test_docs_reference.py fails when the committed pages are stale.
docs-reference: venv
	$(PY) hack/docs_gen.py docs/reference

# promtool checks and unit-tests the alert rules (hack/monitoring/): Debian's prometheus
# package ships it (no service is started where none runs).
# helm from its pinned module (hack/cluster/helm), linked into .cluster/bin like the
# cluster's other tools; `make cluster-up` does the same.
helm:
	@$(CLUSTER_SCRIPTS)/build.sh >/dev/null
	@mkdir -p $(ROOT)/.cluster/bin
	@ln -sfn "$$(bash -c '. $(CLUSTER_SCRIPTS)/lib.sh && addon_bin helm')" $(ROOT)/.cluster/bin/helm

promtool:
	@command -v promtool >/dev/null || { apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus; }

unit: venv promtool helm
	$(VENV)/bin/pytest -q tests/unit

crds: venv
	$(PY) -m tooladapter.crdgen crds/
	$(PY) hack/admission_digests.py
	$(PY) hack/sync_chart.py
	$(PY) hack/chart_values.py

crds-check: venv
	$(PY) -m tooladapter.crdgen --check crds/

install: venv
	kubectl apply --server-side --force-conflicts -f crds/
	kubectl wait --for=condition=Established --timeout=60s -f crds/
	kubectl apply --server-side --force-conflicts -k manifests/
	@# The egress proxy's rights moved to its grants' namespace (tooladapter-egress): an
	@# earlier install's Roles in tooladapter-system would let it read every Secret there.
	kubectl delete -n tooladapter-system role,rolebinding tooladapter-egress-proxy \
	  tooladapter-operator-egress --ignore-not-found

uninstall:
	-kubectl delete -k manifests/ --ignore-not-found
	-kubectl delete -f crds/ --ignore-not-found

# The egress proxy runs beside the operator (its own process; host mode: sandboxes reach it
# on this node's address); it stops with the operator.
run: venv
	@$(PY) -m tooladapter egress-proxy & proxy=$$!; trap 'kill $$proxy 2>/dev/null' EXIT INT TERM; \
	$(PY) -m tooladapter run

# Install or upgrade the Helm release. Helm never upgrades a chart's crds/, so they are
# applied server-side first. On the local cluster the operator image is built and imported
# first (`make image`). Objects of `make install` in the way stop it: `make uninstall` first.
deploy: venv
	@command -v $(HELM) >/dev/null || { echo "make deploy: no helm binary (HELM=$(HELM)); \
	  the local cluster's tools are in .cluster/bin" >&2; exit 1; }
	@# Objects `make install` applied cannot be taken over by Helm: one line, before anything.
	@HELM=$(HELM) $(PY) hack/deploy_preflight.py $(DEPLOY_RELEASE) $(DEPLOY_NAMESPACE) $(DEPLOY_ARGS)
	@if [ "$(KUBECONFIG)" = "$(LOCAL_KUBECONFIG)" ]; then $(MAKE) --no-print-directory image; fi
	kubectl apply --server-side --force-conflicts -f crds/
	kubectl wait --for=condition=Established --timeout=60s -f crds/
	$(HELM) upgrade --install $(DEPLOY_RELEASE) charts/tooladapter \
	  --namespace $(DEPLOY_NAMESPACE) --create-namespace --wait --timeout 5m \
	  $(DEPLOY_ARGS)
	kubectl label --overwrite namespace $(DEPLOY_NAMESPACE) \
	  pod-security.kubernetes.io/enforce=restricted pod-security.kubernetes.io/enforce-version=latest

# Remove the release. The operators are stopped first, while their RBAC still exists, so the
# leader's clean stop deletes its leadership Lease (helm uninstall alone removes the RBAC
# before the pods have stopped). CRDs stay (deleting them deletes every tool, policy and
# invocation), and so does the receipts' claim (artifacts.file.keepOnUninstall).
DEPLOY_OPERATORS = -n $(DEPLOY_NAMESPACE) \
	-l app.kubernetes.io/instance=$(DEPLOY_RELEASE),app.kubernetes.io/component=operator
undeploy:
	-kubectl scale deployment $(DEPLOY_OPERATORS) --replicas=0
	-kubectl wait --for=delete pod $(DEPLOY_OPERATORS) --timeout=120s
	-$(HELM) uninstall $(DEPLOY_RELEASE) --namespace $(DEPLOY_NAMESPACE) --wait --timeout 2m
	@echo "kept: the CRDs (kubectl delete -f crds/), the receipts' claim" \
	  "(kubectl delete pvc -n $(DEPLOY_NAMESPACE) -l app.kubernetes.io/instance=$(DEPLOY_RELEASE))" \
	  "and the gateway's TLS Secret the chart made (kubectl delete secret -n $(DEPLOY_NAMESPACE) <prefix>-gateway-tls)"

# The in-cluster suite: deploys (tests/deploy/conftest.py runs `make deploy`), then calls,
# failover, upgrade and finally uninstall. Never together with `make install`'s objects.
deploy-test: venv
	TOOLADAPTER_REQUIRE_CLUSTER=1 $(VENV)/bin/pytest -q tests/deploy

demo: venv
	@if [ "$(KUBECONFIG)" = "$(LOCAL_KUBECONFIG)" ]; then $(MAKE) --no-print-directory cluster-up; fi
	$(MAKE) --no-print-directory install
	$(PY) hack/demo.py

# The S3-compatible server the s3 artifact tests start (built once into ~/.cache/tooladapter).
s3-server:
	hack/s3/build.sh >/dev/null

# Debian's chromium for the reviewers' page tests (Playwright drives it; never `playwright install`).
browser:
	@command -v chromium >/dev/null || { apt-get update -qq && apt-get install -y -qq chromium; }

# The OpenTelemetry Collector (OTLP receiver, file exporter) the tracing tests export to,
# built once from hack/otel/go.mod into ~/.cache/tooladapter/bin.
otel-collector:
	hack/otel/build.sh >/dev/null

# The OAuth 2.0 server (client credentials, token exchange, revocation) the minted-credential
# tests mint from, built once from hack/oauth/go.mod into ~/.cache/tooladapter/bin.
oauth-server:
	hack/oauth/build.sh >/dev/null

# The TypeScript SDK client of the MCP interop tests (hack/mcp-ts: pinned by its lock,
# npm ci into ~/.cache/tooladapter/mcp-ts-<digest>/; node from the machine).
mcp-ts-client:
	hack/mcp-ts/install.sh

# Three workers, a test file each at a time (`--dist loadfile`: a module's operator stays in one
# worker). Most of a test's time is spent waiting on the cluster (pods starting, watches), so
# a third worker on two cores pays: 341 tests in 676 s against 850 s with two. The cluster's
# own checks (tests/cluster) run among them. Every worker has its own session prefix,
# operator and namespaces. Tests that read or change what the whole cluster shares (marker
# `cluster_wide`) run after, alone.
INTEGRATION_WORKERS ?= 3
integration: venv s3-server browser otel-collector oauth-server mcp-ts-client
	TOOLADAPTER_REQUIRE_CLUSTER=1 $(VENV)/bin/pytest -q -m "not cluster_down and not cluster_wide" \
	  -n $(INTEGRATION_WORKERS) --dist loadfile --durations=30 \
	  --junitxml=$(ROOT)/.cluster/integration-junit.xml tests/cluster tests/integration
	TOOLADAPTER_REQUIRE_CLUSTER=1 $(VENV)/bin/pytest -q -m "cluster_wide" tests/integration

# The host-process suite first (it reads the operator's log and artifacts and kills its
# process), then what `make install` applied is removed and the Helm-installed operator is
# tested (tests/deploy); kubectl-applied and Helm-owned objects never coexist.
# The Go builds (cluster binaries, SeaweedFS, the collector, the OAuth server; no-ops when
# cached) start first, in the background, before even the virtualenv (its downloads overlap
# their compiling): lint and most unit tests need none of them. A cold build spends much of
# its time downloading modules: hack/prefetch.sh fetches every build's modules at once while
# the first build compiles (4.6 GB in 134 s here, against about 70 s for SeaweedFS's alone).
# `unit` waits for them through helm's build lock. The local cluster's images are built
# beside lint too (their downloads and layers need no cluster; cluster-up imports them).
BUILD_LOG := $(ROOT)/.cluster/prebuild.log
test:
	@mkdir -p $(ROOT)/.cluster
	@hack/prefetch.sh >$(ROOT)/.cluster/prefetch.log 2>&1 &
	@( $(CLUSTER_SCRIPTS)/build.sh && hack/s3/build.sh && hack/otel/build.sh && hack/oauth/build.sh ) >$(BUILD_LOG) 2>&1 & \
	  echo "builds in the background (log: $(BUILD_LOG)); every Go module they need is fetched at once beside them (log: $(ROOT)/.cluster/prefetch.log)"
	$(MAKE) --no-print-directory venv
	@if [ "$(KUBECONFIG)" = "$(LOCAL_KUBECONFIG)" ]; then \
	  $(CLUSTER_SCRIPTS)/images.sh --archives >$(ROOT)/.cluster/images.log 2>&1 & \
	  echo "images in the background (log: $(ROOT)/.cluster/images.log)"; fi
	$(MAKE) --no-print-directory lint
	$(MAKE) --no-print-directory unit
	@if [ "$(KUBECONFIG)" = "$(LOCAL_KUBECONFIG)" ]; then $(MAKE) --no-print-directory cluster-up; fi
	$(MAKE) --no-print-directory install
	$(MAKE) --no-print-directory integration
	$(MAKE) --no-print-directory uninstall
	$(MAKE) --no-print-directory deploy-test
	@if [ "$(KUBECONFIG)" = "$(LOCAL_KUBECONFIG)" ]; then \
	  $(VENV)/bin/pytest -q -m cluster_down tests/cluster; fi

# Images without a Docker engine (hack/image): OCI archives under ~/.cache/tooladapter/images,
# imported into the local cluster's containerd only when KUBECONFIG is that cluster's.
IMAGES ?= sandbox operator
IMAGE_TAG ?= dev
image: venv
	PYTHONPATH=$(ROOT)/hack $(PY) -m image $(IMAGES) --tag $(IMAGE_TAG)

# `make image-push REGISTRY=host:port[/path]`: the archives `make image` builds (same cache,
# same IMAGE_TAG), copied with Debian's skopeo (no Docker engine) to
# REGISTRY/tooladapter-<image>:PUSH_TAG, where PUSH_TAG is the chart's appVersion unless
# IMAGE_TAG is given (then IMAGE_TAG). TLS is verified except for the local cluster's node
# registry (`make cluster-status` shows it) and localhost; REGISTRY_TLS_VERIFY=true|false
# decides otherwise. Credentials: skopeo's (`skopeo login REGISTRY`, or REGISTRY_AUTH_FILE).
APP_VERSION := $(shell sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\} *$$/\1/p' charts/tooladapter/Chart.yaml)
PUSH_TAG ?= $(if $(filter command line environment,$(origin IMAGE_TAG)),$(IMAGE_TAG),$(APP_VERSION))
REGISTRY_TLS_VERIFY ?=
image-push: venv skopeo
	@test -n "$(REGISTRY)" || { echo "make image-push: set REGISTRY=host:port" >&2; exit 1; }
	@set -euo pipefail; verify="$(REGISTRY_TLS_VERIFY)"; \
	if [ -z "$$verify" ]; then \
	  node="$$(bash -c '. $(CLUSTER_SCRIPTS)/lib.sh && echo "$$(node_ip):$$REGISTRY_PORT"' 2>/dev/null || true)"; \
	  case "$(REGISTRY)" in "$$node"|"$$node"/*|localhost:*|127.0.0.1:*) verify=false ;; *) verify=true ;; esac; \
	fi; \
	for name in $(IMAGES); do \
	  archive="$$(PYTHONPATH=$(ROOT)/hack $(PY) -m image $$name --tag $(IMAGE_TAG) --load no)"; \
	  ref="$(REGISTRY)/tooladapter-$$name:$(PUSH_TAG)"; \
	  skopeo copy --quiet --dest-tls-verify="$$verify" "oci-archive:$$archive" "docker://$$ref"; \
	  echo "pushed $$ref"; \
	done

# Debian's skopeo, for `make image-push` (copies OCI archives to registries, no daemon).
skopeo:
	@command -v skopeo >/dev/null || { apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends skopeo; }

bench: venv
	@if [ "$(KUBECONFIG)" = "$(LOCAL_KUBECONFIG)" ]; then $(MAKE) --no-print-directory cluster-up; fi
	$(MAKE) --no-print-directory install
	PYTHONPATH=$(ROOT)/hack$${PYTHONPATH:+:$$PYTHONPATH} $(PY) -m bench
	BENCH_REPORT=bench-egress.json PYTHONPATH=$(ROOT)/hack$${PYTHONPATH:+:$$PYTHONPATH} $(PY) -m bench egress
	BENCH_REPORT=bench-sandboxes.json PYTHONPATH=$(ROOT)/hack$${PYTHONPATH:+:$$PYTHONPATH} $(PY) -m bench sandboxes

chaos: venv
	@if [ "$(KUBECONFIG)" = "$(LOCAL_KUBECONFIG)" ]; then $(MAKE) --no-print-directory cluster-up; fi
	$(MAKE) --no-print-directory install
	PYTHONPATH=$(ROOT)/hack$${PYTHONPATH:+:$$PYTHONPATH} $(PY) -m chaos
