"""Issue 5: approvals, brokered credentials, exactly-once, Uncertain effects, interrupt and
clean-up, on the real cluster with the real operator process."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from kubernetes import client

from tests.integration.conftest import Configured
from tests.integration.objects import (
    Agent,
    approve,
    container_tool,
    create,
    descriptor,
    get,
    jobs_of,
    pretty,
    secret_file,
    shell_tool,
    status_of,
)
from tests.integration.servers import Recorder, recording_server
from tooladapter.devtools import Namespace, OperatorProcess, node_ip, wait_for
from tooladapter.receipts.core.check import parse_receipt

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(420)]


def native_tool(api: client.ApiClient, namespace: str, tool: str, cls: str) -> None:
    descriptor(
        api, namespace, tool, kind="native", native={"name": "list-tools"}, side_effect_class=cls
    )


def reviewer_of(api: client.ApiClient, namespace: str, name: str = "reviewer") -> Agent:
    return Agent.create(api, namespace, name, role="tooladapter-reviewer")


def approval_status(api: client.ApiClient, namespace: str, name: str) -> dict[str, object]:
    return status_of(get(api, namespace, "toolapprovals", name))


def test_a_shared_write_call_waits_for_an_approval_bound_to_its_exact_request(
    api: client.ApiClient,
    ns: Namespace,
    agent: Agent,
) -> None:
    native_tool(api, ns.name, "propose", "shared-write")
    agent.grant(["propose"], ["shared-write"])
    reviewer = reviewer_of(api, ns.name)
    call = agent.invoke("propose", {"branch": "a"})
    waiting = status_of(agent.wait(call, states={"AwaitingApproval", "Denied"}))
    assert waiting["state"] == "AwaitingApproval", pretty(waiting)

    wrong_hash = approve(reviewer, call, request_hash="sha256:" + "0" * 64)
    wrong_version = approve(reviewer, call, version="2.0.0")
    for name, words in ((wrong_hash, "request hash"), (wrong_version, "version")):

        def refusal(n: str = name) -> object:
            return approval_status(api, ns.name, n).get("reason")

        reason = wait_for(refusal, timeout=30, what=f"approval {name} refused")
        assert approval_status(api, ns.name, name).get("bound") is False
        assert words in str(reason).lower(), reason
    assert status_of(get(api, ns.name, "toolinvocations", call))["state"] == "AwaitingApproval"

    good = approve(reviewer, call)
    done = status_of(agent.wait(call))
    assert done["state"] == "Observed", pretty(done)
    assert done["approval"]["name"] == good and done["approval"]["reviewer"] == reviewer.user
    assert approval_status(api, ns.name, good)["boundTo"] == call

    # Changed arguments: a new hash, so the old approval does not carry over.
    second = agent.invoke("propose", {"branch": "b"})
    assert (
        status_of(agent.wait(second, states={"AwaitingApproval"}))["requestHash"]
        != done["requestHash"]
    )
    assert approval_status(api, ns.name, good)["boundTo"] == call


def test_rejection_expiry_and_self_approval_never_run_the_call(
    api: client.ApiClient,
    ns: Namespace,
    agent: Agent,
) -> None:
    native_tool(api, ns.name, "propose", "shared-write")
    agent.grant(["propose"], ["shared-write"])
    reviewer = reviewer_of(api, ns.name)

    rejected = agent.invoke("propose", {"n": 1})
    agent.wait(rejected, states={"AwaitingApproval"})
    approve(reviewer, rejected, decision="Rejected")
    status = status_of(agent.wait(rejected))
    assert status["state"] == "Denied" and status["failureClass"] == "policy-denied"
    assert "rejected" in status["message"]

    # The caller approving its own call does not bind (the agent may create approvals too).
    agent.bind("tooladapter-reviewer")
    own = agent.invoke("propose", {"n": 2})
    agent.wait(own, states={"AwaitingApproval"})
    self_approval = wait_for(lambda: approve(agent, own), timeout=30, what="self approval created")
    reason = wait_for(
        lambda: approval_status(api, ns.name, self_approval).get("reason"),
        timeout=30,
        what="self approval refused",
    )
    assert "caller" in str(reason).lower(), reason
    assert status_of(get(api, ns.name, "toolinvocations", own))["state"] == "AwaitingApproval"

    # An agent cannot create an approval naming someone else as reviewer.
    with pytest.raises(client.ApiException) as refused:
        create(
            agent.api,
            ns.name,
            "toolapprovals",
            {
                "kind": "ToolApproval",
                "metadata": {"generateName": "spoof-"},
                "spec": {
                    "invocation": own,
                    "requestHash": "sha256:" + "1" * 64,
                    "descriptorDigest": "sha256:" + "d" * 64,
                    "toolVersion": "1.0.0",
                    "decision": "Approved",
                    "reviewer": reviewer.user,
                },
            },
        )
    assert refused.value.status in (400, 403, 422) and "reviewer" in str(refused.value.body)

    # An expired wait ends Denied.
    create(
        api,
        ns.name,
        "toolpolicies",
        {
            "kind": "ToolPolicy",
            "metadata": {"name": "fast"},
            "spec": {"approval": {"timeoutSeconds": 3}},
        },
    )
    wait_for(
        lambda: status_of(get(api, ns.name, "toolpolicies", "fast")).get("valid"),
        timeout=30,
        what="policy valid",
    )
    expired = status_of(agent.wait(agent.invoke("propose", {"n": 3}), timeout=60))
    assert expired["state"] == "Denied" and expired["failureClass"] == "policy-denied"
    assert "expired" in expired["message"]


@pytest.fixture
def counting_server() -> Iterator[Recorder]:
    with recording_server(node_ip()) as server:
        yield server


def test_twenty_concurrent_invocations_with_one_key_execute_once(
    api: client.ApiClient,
    ns: Namespace,
    agent: Agent,
    counting_server: Recorder,
) -> None:
    host, port = counting_server.host, counting_server.port
    shell_tool(api, ns.name, "hit", egress=[f"{host}/32"])
    agent.grant(["hit"], ["sandbox"])
    command = {"command": f"wget -q -O - http://{host}:{port}/effect"}
    with ThreadPoolExecutor(max_workers=20) as pool:
        names = list(
            pool.map(
                lambda i: agent.invoke(
                    "hit", command, name=f"same-key-{i}", idempotencyKey="deploy-42"
                ),
                range(20),
            )
        )
    finals = [status_of(agent.wait(n, timeout=240)) for n in names]
    winners = [s for s in finals if not s.get("duplicateOf")]
    assert len(winners) == 1, pretty(finals)
    assert winners[0]["state"] == "Observed", pretty(winners[0])
    winner = next(n for n, s in zip(names, finals, strict=True) if not s.get("duplicateOf"))
    for s in finals:
        if s.get("duplicateOf"):
            assert s["duplicateOf"] == winner and s["state"] == "Observed", pretty(s)
            assert s["receiptRef"] == winners[0]["receiptRef"]
    assert counting_server.total == 1
    assert len(jobs_of(api, ns.name)) == 1


def pod_of(api: client.ApiClient, namespace: str, uid: str) -> client.V1Pod | None:
    pods = (
        client.CoreV1Api(api)
        .list_namespaced_pod(namespace, label_selector=f"tooladapter.dev/invocation-uid={uid}")
        .items
    )
    return pods[0] if pods else None


def running_pod(api: client.ApiClient, namespace: str, name: str) -> client.V1Pod | None:
    uid = get(api, namespace, "toolinvocations", name)["metadata"]["uid"]
    pod = pod_of(api, namespace, uid)
    return pod if pod is not None and pod.status.phase == "Running" else None


def test_a_restarted_operator_follows_its_job_or_settles_uncertain_never_running_twice(
    api: client.ApiClient,
    ns: Namespace,
    agent: Agent,
    operator: OperatorProcess,
) -> None:
    shell_tool(api, ns.name, "work", side_effect_class="sandbox", timeout=120)
    shell_tool(api, ns.name, "deploy", side_effect_class="external", timeout=120)
    agent.grant(["work", "deploy"], ["sandbox", "external"])
    reviewer = reviewer_of(api, ns.name)

    follow = agent.invoke("work", {"command": "sleep 8"})
    lost = agent.invoke("deploy", {"command": "sleep 60"})
    agent.wait(lost, states={"AwaitingApproval"})
    approve(reviewer, lost)
    wait_for(lambda: running_pod(api, ns.name, follow), timeout=120, what="first pod running")
    wait_for(lambda: running_pod(api, ns.name, lost), timeout=120, what="second pod running")
    assert status_of(get(api, ns.name, "toolinvocations", follow))["state"] == "Executing"

    operator.kill()
    try:
        lost_pod = running_pod(api, ns.name, lost)
        assert lost_pod is not None
        assert lost_pod.metadata.name is not None
        client.CoreV1Api(api).delete_namespaced_pod(
            lost_pod.metadata.name, ns.name, grace_period_seconds=0
        )
        wait_for(
            lambda: running_pod(api, ns.name, lost) is None, timeout=60, what="deleted pod gone"
        )
    finally:
        operator.start()

    followed = status_of(agent.wait(follow, timeout=180))
    assert followed["state"] == "Observed", pretty(followed)
    assert (
        len(
            [
                j
                for j in jobs_of(api, ns.name)
                if j.metadata.name.endswith(
                    get(api, ns.name, "toolinvocations", follow)["metadata"]["uid"]
                )
            ]
        )
        == 1
    )
    uncertain = status_of(agent.wait(lost, timeout=180))
    assert uncertain["state"] == "Uncertain", pretty(uncertain)
    assert uncertain["failureClass"] == "effect-unconfirmed"

    # Only a person with the operations role may confirm; an agent is refused by RBAC.
    patch: dict[str, object] = {
        "status": {
            "effectConfirmation": {
                "effectHappened": False,
                "confirmedBy": agent.user,
                "evidence": "I say so",
            }
        }
    }
    with pytest.raises(client.ApiException) as refused:
        client.CustomObjectsApi(agent.api).patch_namespaced_custom_object_status(
            "tooladapter.dev", "v1alpha1", ns.name, "toolinvocations", lost, patch
        )
    assert refused.value.status == 403

    oncall = Agent.create(api, ns.name, "oncall", role="tooladapter-operations")
    patch = {
        "status": {
            "effectConfirmation": {
                "effectHappened": True,
                "confirmedBy": oncall.user,
                "evidence": "deployment 42 visible in the audit log",
            }
        }
    }
    wait_for(
        lambda: client.CustomObjectsApi(oncall.api).patch_namespaced_custom_object_status(
            "tooladapter.dev", "v1alpha1", ns.name, "toolinvocations", lost, patch
        ),
        timeout=30,
        what="operations role effective",
    )

    def recorded() -> dict[str, Any] | None:
        s = status_of(get(api, ns.name, "toolinvocations", lost))
        return s if (s.get("effectConfirmation") or {}).get("recorded") else None

    confirmed = wait_for(recorded, timeout=60, what="confirmation recorded")
    assert confirmed["state"] == "Uncertain"
    assert confirmed["receipt"]["effectConfirmed"] is True
    digest = confirmed["receiptRef"].split(":")[1]
    receipt = json.dumps(
        parse_receipt((operator.artifacts / "sha256" / digest[:2] / digest).read_bytes())
    )
    assert oncall.user in receipt and "deployment 42" in receipt


def test_credentials_fail_closed_are_redacted_and_die_with_the_call(
    api: client.ApiClient,
    ns: Namespace,
    agent: Agent,
) -> None:
    value = "s3cr3t-Value-" + "q" * 16
    client.CoreV1Api(api).create_namespaced_secret(
        ns.name,
        {  # type: ignore[arg-type]  # the client sends a dict body as is
            "metadata": {"name": "db"},
            "data": {
                "password": base64.b64encode(value.encode()).decode(),
                "unrelated": base64.b64encode(b"not brokered").decode(),
            },
        },
    )
    # Container tools: the platform's fixed argv (a shell tool, whose command the agent
    # chooses, may not carry brokered secrets: see test_holes.py).
    container_tool(
        api,
        ns.name,
        "with-db",
        ["cat", "/tooladapter/credentials/db/password"],
        credentials=[secret_file("db", "db", "password")],
    )
    container_tool(
        api,
        ns.name,
        "with-missing",
        ["true"],
        credentials=[secret_file("db", "nope", "password")],
    )
    agent.grant(["with-db", "with-missing"], ["sandbox"])

    missing = status_of(agent.wait(agent.invoke("with-missing", {})))
    assert missing["state"] == "Denied" and missing["deniedStage"] == "credentials", pretty(missing)
    assert missing["failureClass"] == "credentials"

    echoed = agent.invoke("with-db", {})
    status = status_of(agent.wait(echoed, timeout=180))
    assert status["state"] == "Observed", pretty(status)
    assert value not in str(status) and "REDACTED" in status["result"]["content"]
    lease = status["sandboxLease"]
    assert lease["releasedAt"] and lease["secretName"]
    with pytest.raises(client.ApiException) as gone:
        client.CoreV1Api(api).read_namespaced_secret(lease["secretName"], ns.name)
    assert gone.value.status == 404
    # Only the Job of the call with credentials exists: the fail-closed one made none.
    assert len(jobs_of(api, ns.name)) == 1


def test_an_interrupted_call_ends_cancelled_or_uncertain_and_its_job_is_gone(
    api: client.ApiClient,
    ns: Namespace,
    agent: Agent,
) -> None:
    shell_tool(api, ns.name, "long", timeout=300)
    agent.grant(["long"], ["sandbox"])
    call = agent.invoke("long", {"command": "sleep 300"})
    wait_for(lambda: running_pod(api, ns.name, call), timeout=120, what="pod running")
    client.CustomObjectsApi(agent.api).patch_namespaced_custom_object(
        "tooladapter.dev",
        "v1alpha1",
        ns.name,
        "toolinvocations",
        call,
        {"spec": {"interrupt": True}},
    )
    status = status_of(agent.wait(call, timeout=120))
    # A sandbox-class effect stays inside its own sandbox: Cancelled.
    assert status["state"] == "Cancelled", pretty(status)
    uid = get(api, ns.name, "toolinvocations", call)["metadata"]["uid"]
    wait_for(
        lambda: not any(j.metadata.name == f"ta-{uid}" for j in jobs_of(api, ns.name)),
        timeout=60,
        what="job deleted",
    )


def test_the_reaper_leaves_nothing_of_ended_invocations(
    api: client.ApiClient, configured: Callable[[Mapping[str, str]], Configured]
) -> None:
    # Sandboxes kept 3 s for inspection (the session operator keeps them 30 s); reaped every 3 s.
    serving = configured({"TOOLADAPTER_SANDBOX_RETAIN_SECONDS": "3"})
    ns = serving.namespace(api)
    try:
        reaped(api, ns)
    finally:
        ns.delete()


def reaped(api: client.ApiClient, ns: Namespace) -> None:
    agent = Agent.create(api, ns.name, "agent-1")
    client.CoreV1Api(api).create_namespaced_secret(
        ns.name,
        {"metadata": {"name": "k"}, "data": {"v": base64.b64encode(b"x" * 20).decode()}},  # type: ignore[arg-type]  # the client sends a dict body as is
    )
    container_tool(
        api,
        ns.name,
        "tidy",
        ["cat", "/tooladapter/arguments.json"],
        credentials=[secret_file("k", "k", "v")],
    )
    agent.grant(["tidy"], ["sandbox"])
    for i in range(3):
        assert (
            status_of(agent.wait(agent.invoke("tidy", {"call": f"{i}"}), timeout=180))["state"]
            == "Observed"
        )
    selector = "app.kubernetes.io/managed-by=tooladapter"

    def clean() -> bool:
        return not (
            client.BatchV1Api(api).list_namespaced_job(ns.name, label_selector=selector).items
            or client.CoreV1Api(api).list_namespaced_secret(ns.name, label_selector=selector).items
            or client.NetworkingV1Api(api)
            .list_namespaced_network_policy(ns.name, label_selector=selector)
            .items
        )

    wait_for(clean, timeout=120, what="reaper to remove jobs, secrets and network policies")
