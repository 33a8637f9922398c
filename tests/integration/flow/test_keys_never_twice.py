"""A key never runs twice, on the real cluster: with a short retention, an idempotency
key's claim (its Lease) expires and retention deletes its first call; the same key with the
same request then ends as a duplicate of that call, from the receipt index, with its
receipt, and the tool's server counts one request. The same key with other arguments is
still refused `key-reused`.

The operator here has its own configuration (`configured`), out of the session operator's
scope."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial

import pytest
from kubernetes import client

from tests.integration.conftest import Configured
from tests.integration.flow.test_call_semantics import LOOPBACK, http_tool
from tests.integration.objects import Agent, get, pretty, status_of
from tests.integration.servers import recording_server
from tooladapter.devtools import wait_for
from tooladapter.kube.claims import idempotency_claim_name

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def short_retention(configured: Callable[[Mapping[str, str]], Configured]) -> Configured:
    return configured(
        {
            "TOOLADAPTER_RETENTION_SECONDS": "2",
            "TOOLADAPTER_IDEMPOTENCY_RETENTION_SECONDS": "2",
            "TOOLADAPTER_RECONCILE_INTERVAL_SECONDS": "2",
        }
    )


def invocation_gone(api: client.ApiClient, namespace: str, name: str) -> bool:
    try:
        get(api, namespace, "toolinvocations", name)
    except client.ApiException as exc:
        return exc.status == 404
    return False


def lease_gone(api: client.ApiClient, namespace: str, name: str) -> bool:
    try:
        client.CoordinationV1Api(api).read_namespaced_lease(name, namespace)
    except client.ApiException as exc:
        return exc.status == 404
    return False


def test_a_key_reused_after_its_claim_expired_and_its_call_was_deleted_returns_the_first_receipt(
    api: client.ApiClient, short_retention: Configured
) -> None:
    ns = short_retention.namespace(api)
    try:
        agent = Agent.create(api, ns.name, "agent-1")
        with recording_server(LOOPBACK) as server:
            http_tool(api, ns.name, "read", server.port, "read")
            agent.grant(["read"], ["read"])
            first = agent.invoke("read", {"id": "a"}, idempotencyKey="k-1")
            first_status = status_of(agent.wait(first))
            assert first_status["state"] == "Observed", pretty(first_status)
            assert server.total == 1
            claim = idempotency_claim_name(ns.name, agent.user, "k-1")
            # The claim and the call both go (the claim retention runs once a minute).
            wait_for(partial(invocation_gone, api, ns.name, first), timeout=90, what="call deleted")
            wait_for(partial(lease_gone, api, ns.name, claim), timeout=150, what="claim expired")

            again = agent.invoke("read", {"id": "a"}, idempotencyKey="k-1")
            status = status_of(agent.wait(again))

            assert status["state"] == "Observed", pretty(status)
            assert status["duplicateOf"] == first
            assert status["receiptRef"] == first_status["receiptRef"]
            assert status["auditRef"] != first_status["receiptRef"]
            assert any(
                s["stage"] == "idempotency"
                and s["outcome"] == "duplicate"
                and "receipt index" in s.get("detail", "")
                for s in status["stages"]
            ), pretty(status)
            # Its first call's receipt, as stored: the one the first call named.
            digest = first_status["receiptRef"].removeprefix("sha256:")
            assert (short_retention.operator.artifacts / "sha256" / digest[:2] / digest).is_file()

            other = status_of(agent.wait(agent.invoke("read", {"id": "b"}, idempotencyKey="k-1")))
            assert (other["state"], other["failureClass"]) == ("Denied", "key-reused"), pretty(
                other
            )
            assert first in other["message"]
            assert server.total == 1
            assert server.hits["/effect/a"] == 1
    finally:
        ns.delete()
