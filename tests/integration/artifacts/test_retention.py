"""Bounded storage on the real cluster: an operator with a short retention deletes a
finished invocation soon after its end, keeps its receipt in the artifact store, and keeps a
call that still waits for an approval.

The operator here serves `ret-<SESSION>-*`, out of the session operator's scope."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator

import pytest
from kubernetes import client

from tests.integration.objects import Agent, descriptor, get, pretty, shell_tool, status_of
from tooladapter.devtools import SESSION, Namespace, OperatorProcess, wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]

SCOPE = f"ret-{SESSION}"


@pytest.fixture(scope="module")
def short_retention(
    api: client.ApiClient, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorProcess]:
    op = OperatorProcess(
        tmp_path_factory.mktemp("retention-operator"),
        {
            "TOOLADAPTER_NAMESPACES": f"{SCOPE}-*",
            "TOOLADAPTER_RETENTION_SECONDS": "2",
            "TOOLADAPTER_RECONCILE_INTERVAL_SECONDS": "2",
        },
    )
    op.start()
    yield op
    op.stop()


def gone(api: client.ApiClient, namespace: str, name: str) -> bool:
    try:
        get(api, namespace, "toolinvocations", name)
    except client.ApiException as exc:
        return exc.status == 404
    return False


def test_a_finished_call_is_deleted_after_retention_and_a_waiting_one_is_kept(
    api: client.ApiClient, short_retention: OperatorProcess
) -> None:
    ns = Namespace(api, prefix=SCOPE)
    try:
        agent = Agent.create(api, ns.name, "agent-1")
        descriptor(api, ns.name, "list-tools", kind="native", native={"name": "list-tools"})
        shell_tool(api, ns.name, "sh", shell={"allow": ["echo"]})
        agent.grant(["list-tools", "sh"], ["read", "sandbox", "shared-write"])

        # Not on the allow list: it waits for an approval that never comes.
        waiting = agent.invoke("sh", {"command": "uname -a"})
        agent.wait(waiting, states={"AwaitingApproval"})
        done = agent.wait(agent.invoke("list-tools", {}))
        status = status_of(done)
        assert status["state"] == "Observed", pretty(status)
        name = done["metadata"]["name"]

        wait_for(lambda: gone(api, ns.name, name), timeout=90, what=f"{name} deleted")

        # The receipt outlives the object, under its hash.
        digest = status["receiptRef"].removeprefix("sha256:")
        data = (short_retention.artifacts / "sha256" / digest[:2] / digest).read_bytes()
        assert hashlib.sha256(data).hexdigest() == digest
        # The call waiting for an approval is still there, still waiting.
        kept = get(api, ns.name, "toolinvocations", waiting)
        assert status_of(kept)["state"] == "AwaitingApproval"
        short_retention.wait_log("retention: deleted 1 finished invocation(s)", timeout=30)
    finally:
        ns.delete()
