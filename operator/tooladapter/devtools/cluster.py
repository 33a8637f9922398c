"""The API server of KUBECONFIG: the admin client, ServiceAccount identities, namespaces."""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kubernetes import client, config

from tooladapter.devtools.waiting import wait_for

#: The checkout this package runs from (an editable install, as `make venv` makes it).
ROOT = Path(__file__).resolve().parents[3]
#: Namespaces of this test session start with this prefix, and the operator this session
#: starts watches only those (TOOLADAPTER_NAMESPACES), so concurrent sessions on one
#: cluster never process each other's invocations.
SESSION = f"ta{uuid.uuid4().hex[:6]}"


def kubeconfig() -> str:
    return os.environ.get("KUBECONFIG") or str(ROOT / ".cluster" / "kubeconfig")


def admin_client() -> client.ApiClient:
    new_client: Callable[..., client.ApiClient] = config.new_client_from_config  # unannotated
    return new_client(config_file=kubeconfig())


def _core(api: client.ApiClient) -> Any:
    """CoreV1Api, untyped: the bodies here are plain dicts, which the client sends as they
    are, while its annotations name the model classes."""
    return client.CoreV1Api(api)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


class Namespace:
    """A fresh namespace with tooladapter labels; deleted (not awaited) afterwards.

    Named `<prefix>-<random>`, by default within this session's operator's scope
    (`SESSION-*`); another prefix keeps it out of that scope (for operators a test starts
    itself)."""

    def __init__(
        self,
        api: client.ApiClient,
        labels: dict[str, str] | None = None,
        *,
        prefix: str = SESSION,
    ) -> None:
        self.api = api
        self.name = unique(prefix)
        core = _core(api)
        core.create_namespace(
            {
                "metadata": {
                    "name": self.name,
                    "labels": {"tooladapter.dev/test": "true", **(labels or {})},
                }
            }
        )
        wait_for(
            lambda: any(
                sa.metadata.name == "default"
                for sa in core.list_namespaced_service_account(self.name).items
            ),
            timeout=60,
            what=f"default serviceaccount in {self.name}",
        )

    def delete(self) -> None:
        with contextlib.suppress(Exception):
            _core(self.api).delete_namespace(self.name)


def token_for(api: client.ApiClient, namespace: str, sa: str, seconds: int = 3600) -> str:
    core = _core(api)
    with contextlib.suppress(client.ApiException):
        core.create_namespaced_service_account(namespace, {"metadata": {"name": sa}})
    result = core.create_namespaced_service_account_token(
        sa, namespace, {"spec": {"expirationSeconds": seconds}}
    )
    return str(result.status.token)


def client_with_token(api: client.ApiClient, token: str) -> client.ApiClient:
    cfg = client.Configuration()
    admin = api.configuration
    cfg.host = admin.host
    cfg.ssl_ca_cert = admin.ssl_ca_cert
    cfg.verify_ssl = admin.verify_ssl
    cfg.api_key = {"authorization": token}
    cfg.api_key_prefix = {"authorization": "Bearer"}
    return client.ApiClient(cfg)


def sa_user(namespace: str, sa: str) -> str:
    return f"system:serviceaccount:{namespace}:{sa}"
