"""Helpers for the test suite, the demo and the benchmarks; not used by the operator.

Nothing here fakes Kubernetes: clients talk to the API server of KUBECONFIG, identities are
ServiceAccount tokens issued by it (TokenRequest), and the operator runs as its own process
exactly as `make run` starts it.

They drive the cluster with the synchronous `kubernetes` client of the `dev` extra; nothing
here imports kopf or kubernetes_asyncio, and nothing in the operator imports this package.
"""

from __future__ import annotations

from tooladapter.devtools.cluster import (
    ROOT,
    SESSION,
    Namespace,
    admin_client,
    client_with_token,
    kubeconfig,
    sa_user,
    token_for,
    unique,
)
from tooladapter.devtools.host import free_port, node_ip
from tooladapter.devtools.process import EgressProxyProcess, OperatorProcess, operator_running
from tooladapter.devtools.waiting import wait_for

__all__ = [
    "ROOT",
    "SESSION",
    "EgressProxyProcess",
    "Namespace",
    "OperatorProcess",
    "admin_client",
    "client_with_token",
    "free_port",
    "kubeconfig",
    "node_ip",
    "operator_running",
    "sa_user",
    "token_for",
    "unique",
    "wait_for",
]
