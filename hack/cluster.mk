# Local single-node Kubernetes cluster (issue 2). Included by the top-level
# Makefile. Everything runs as host processes (needs root); binaries are
# built once from hack/cluster/go.mod into ~/.cache/tooladapter/.
#
#   make cluster-up       start (idempotent); KUBECONFIG=.cluster/kubeconfig
#   make cluster-down     stop every cluster process, remove state (keeps the cache)
#   make cluster-status   show components; exit 0 only when healthy
#   make cluster-build    only build/cache the binaries
#   make cluster-test     run the cluster integration tests (tests/cluster)
#   CLUSTER=kind          use kind (needs Docker + kind) instead of host processes

CLUSTER ?= local
export CLUSTER
CLUSTER_MK_DIR := $(patsubst %/,%,$(dir $(lastword $(MAKEFILE_LIST))))
CLUSTER_SCRIPTS := $(CLUSTER_MK_DIR)/cluster
CLUSTER_STATE := $(abspath $(CLUSTER_MK_DIR)/../.cluster)
CLUSTER_PYTEST ?= $(if $(VENV),$(VENV)/bin/pytest,python3 -m pytest)

.PHONY: cluster-up cluster-down cluster-status cluster-build cluster-test

cluster-up:
	$(CLUSTER_SCRIPTS)/up.sh

cluster-down:
	$(CLUSTER_SCRIPTS)/down.sh

cluster-status:
	@$(CLUSTER_SCRIPTS)/status.sh

cluster-build:
	$(CLUSTER_SCRIPTS)/build.sh

# Runs against whatever KUBECONFIG points at (default: this checkout's cluster).
# The destructive cluster-down test (marker cluster_down) is excluded here.
cluster-test: cluster-up
	KUBECONFIG=$${KUBECONFIG:-$(CLUSTER_STATE)/kubeconfig} PATH=$(CLUSTER_STATE)/bin:$$PATH \
	  TOOLADAPTER_REQUIRE_CLUSTER=1 \
	  $(CLUSTER_PYTEST) tests/cluster -m "not cluster_down" $(PYTEST_ARGS)
