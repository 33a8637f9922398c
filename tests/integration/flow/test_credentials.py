"""Brokered credentials die with the call: a minted token is bound to the lease's Secret."""

from __future__ import annotations

import base64

import pytest
from kubernetes import client

from tests.integration.objects import Agent, descriptor, get, pretty, status_of
from tooladapter.devtools import Namespace, wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]


def authenticated(api: client.ApiClient, token: str) -> bool:
    review = client.AuthenticationV1Api(api).create_token_review({"spec": {"token": token}})  # type: ignore[arg-type]  # the client sends a dict body as is
    return bool(review.status.authenticated)


def test_a_minted_token_stops_working_when_its_call_ends(
    api: client.ApiClient, ns: Namespace, agent: Agent
) -> None:
    core = client.CoreV1Api(api)
    core.create_namespaced_service_account(ns.name, {"metadata": {"name": "deployer"}})  # type: ignore[arg-type]  # the client sends a dict body as is
    descriptor(
        api,
        ns.name,
        "with-token",
        kind="container",
        side_effect_class="sandbox",
        timeoutSeconds=60,
        sandbox={
            "command": ["/bin/sh", "-c", "sleep 8; echo done"],
            "resources": {"limits": {"cpu": "200m", "memory": "32Mi"}},
            "egress": {"allow": []},
        },
        credentials=[
            {
                "name": "deployer",
                "source": {"serviceAccountToken": {"serviceAccountName": "deployer"}},
                "inject": {"file": "/tooladapter/credentials/deployer/token"},
            }
        ],
    )
    agent.grant(["with-token"], ["sandbox"])
    name = agent.invoke("with-token", {})
    uid = get(api, ns.name, "toolinvocations", name)["metadata"]["uid"]

    def token_of_the_lease() -> str | None:
        secret = f"ta-cred-{uid}"
        try:
            data = core.read_namespaced_secret(secret, ns.name).data or {}
        except client.ApiException:
            return None
        raw = data.get("file-deployer")  # the file's key in the lease's Secret
        return base64.b64decode(raw).decode() if raw else None

    token = wait_for(token_of_the_lease, timeout=60, what="the lease's token")
    assert authenticated(api, token), "a live lease's token must work"
    status = status_of(agent.wait(name, timeout=120))
    assert status["state"] == "Observed", pretty(status)
    # The Secret went with the call, and the token bound to it with the Secret.
    wait_for(lambda: not authenticated(api, token), timeout=30, what="the token revoked")
