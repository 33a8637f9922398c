"""Fault semantics on the real cluster: never twice, never stuck, never stale."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, cast

import pytest
from kubernetes import client

from tests.integration.objects import (
    TERMINAL,
    Agent,
    approve,
    confirm_effect,
    create,
    custom,
    descriptor,
    events_of,
    get,
    jobs_of,
    pretty,
    shell_tool,
    status_of,
)
from tests.integration.servers import Recorder, recording_server
from tooladapter import GROUP, VERSION
from tooladapter.devtools import (
    SESSION,
    Namespace,
    OperatorProcess,
    free_port,
    node_ip,
    wait_for,
)
from tooladapter.receipts.core.check import parse_receipt

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(600)]


@pytest.fixture
def server() -> Iterator[Recorder]:
    with recording_server(node_ip()) as recorder:
        yield recorder


@pytest.fixture
def hits(server: Recorder) -> str:
    return server.address


def effect_tool(api: client.ApiClient, namespace: str, address: str, cls: str) -> None:
    """An http tool with an effect: POST /effect/<id> to the counting server."""
    descriptor(
        api,
        namespace,
        "effect",
        kind="http",
        side_effect_class=cls,
        inputSchema={
            "type": "object",
            "properties": {"id": {"type": "string", "pattern": "^[a-z0-9-]{1,40}$"}},
            "required": ["id"],
        },
        http={
            "method": "POST",
            "url": f"http://{address}/effect/{{id}}",
            "allowedHosts": [address],
        },
    )


def reviewer_of(api: client.ApiClient, namespace: str) -> Agent:
    return Agent.create(api, namespace, "reviewer", role="tooladapter-reviewer")


def test_two_operators_on_the_same_namespaces_execute_each_call_exactly_once(
    api: client.ApiClient, tmp_path: Path, hits: str, server: Recorder
) -> None:
    # Both operators serve the same scope and neither stands by: only the execution claim
    # (Executing written onto the version each flow saw) keeps a call from running twice.
    prefix = f"two-{SESSION}"
    env = {"TOOLADAPTER_NAMESPACES": f"{prefix}-*", "TOOLADAPTER_LEADER_ELECTION": "false"}
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first = OperatorProcess(tmp_path / "a", env=env)
    second = OperatorProcess(tmp_path / "b", env=env)
    first.start()
    second.start()
    ns = Namespace(api, prefix=prefix)
    try:
        effect_tool(api, ns.name, hits, "external")
        descriptor(
            api,
            ns.name,
            "gated",
            kind="http",
            side_effect_class="shared-write",
            inputSchema={"type": "object", "properties": {"id": {"type": "string"}}},
            http={"method": "POST", "url": f"http://{hits}/gated/{{id}}", "allowedHosts": [hits]},
        )
        agent = Agent.create(api, ns.name, "agent-1")
        agent.grant(["effect", "gated"], ["external", "shared-write"])
        reviewer = reviewer_of(api, ns.name)
        with ThreadPoolExecutor(max_workers=10) as pool:
            names = list(
                pool.map(
                    lambda i: agent.invoke(
                        "gated" if i % 5 == 0 else "effect", {"id": f"c{i}"}, name=f"c{i}"
                    ),
                    range(50),
                )
            )
        # Every effectful class is gated: an automatic reviewer approves each call as soon as
        # it waits (the approvals bind to the uid, so neither operator can reuse one).
        for name in names:
            agent.wait(name, states={"AwaitingApproval"}, timeout=120)
            approve(reviewer, name)
        finals = {n: status_of(agent.wait(n, timeout=300)) for n in names}
        assert all(s["state"] == "Observed" for s in finals.values()), pretty(finals)
        paths = {f"/{'gated' if i % 5 == 0 else 'effect'}/c{i}" for i in range(50)}
        assert dict(server.hits) == dict.fromkeys(paths, 1), dict(server.hits)
        holders = Counter(s["execution"]["holder"] for s in finals.values())
        assert sum(holders.values()) == 50
    finally:
        ns.delete()
        first.stop()
        second.stop()


def test_a_job_a_resource_quota_refuses_waits_in_brokered_naming_the_quota_and_never_starts(
    api: client.ApiClient, ns: Namespace, agent: Agent
) -> None:
    """The quota is asked before any effect (a server-side dry run): the call waits in
    Brokered, its message naming the quota, with no Job; interrupted, it ends Cancelled.
    (Running out of the wait is tests/integration/flow/test_capacity.py's.)"""
    client.CoreV1Api(api).create_namespaced_resource_quota(
        ns.name,
        {"metadata": {"name": "no-jobs"}, "spec": {"hard": {"count/jobs.batch": "0"}}},  # type: ignore[arg-type]  # the client sends a dict body as is
    )
    shell_tool(api, ns.name, "sh")
    agent.grant(["sh"], ["sandbox"])
    name = agent.invoke("sh", {"command": "echo hi"})

    def waiting() -> dict[str, Any] | None:
        status = status_of(get(api, ns.name, "toolinvocations", name))
        return status if "no-jobs" in (status.get("message") or "") else None

    status = wait_for(waiting, timeout=60, what="the call waiting for the quota")
    assert status["state"] == "Brokered", pretty(status)
    assert "quota" in status["message"].lower()
    assert jobs_of(api, ns.name) == []
    custom(agent.api).patch_namespaced_custom_object(
        GROUP, VERSION, ns.name, "toolinvocations", name, {"spec": {"interrupt": True}}
    )
    ended = status_of(agent.wait(name, timeout=60))
    assert ended["state"] == "Cancelled", pretty(ended)
    assert ended.get("receiptRef")
    assert jobs_of(api, ns.name) == []


def test_a_descriptor_without_what_its_kind_needs_is_never_active(
    api: client.ApiClient, ns: Namespace
) -> None:
    for kind in ("container", "http", "mcp", "native"):
        with pytest.raises(client.ApiException) as refused:
            descriptor(api, ns.name, f"no-{kind}", kind=kind, wait_active=False)
        assert refused.value.status == 422, refused.value.body
    # A shell tool without a sandbox block runs in the default sandbox: it can run.
    descriptor(
        api,
        ns.name,
        "bare-shell",
        kind="shell",
        side_effect_class="sandbox",
        inputSchema={"type": "object", "properties": {"command": {"type": "string"}}},
    )


def test_an_approval_of_a_deleted_invocation_does_not_bind_a_new_one_of_the_same_name(
    api: client.ApiClient, ns: Namespace, agent: Agent, hits: str, server: Recorder
) -> None:
    effect_tool(api, ns.name, hits, "shared-write")
    agent.grant(["effect"], ["shared-write"])
    reviewer = reviewer_of(api, ns.name)
    first = agent.invoke("effect", {"id": "same"}, name="same-name")
    agent.wait(first, states={"AwaitingApproval"})
    # The reviewer approves by name only (no uid): single use must still hold.
    approval = approve(reviewer, first, bind_uid=False)
    assert status_of(agent.wait(first))["state"] == "Observed"
    custom(api).delete_namespaced_custom_object(GROUP, VERSION, ns.name, "toolinvocations", first)
    wait_for(
        lambda: (
            not cast(
                dict[str, Any],
                custom(api).list_namespaced_custom_object(
                    GROUP, VERSION, ns.name, "toolinvocations"
                ),
            ).get("items")
        ),
        timeout=30,
        what="first invocation gone",
    )
    # Waits stop after 5 s here: a call the old approval would bind ends Observed instead.
    create(
        api,
        ns.name,
        "toolpolicies",
        {
            "kind": "ToolPolicy",
            "metadata": {"name": "short-waits"},
            "spec": {"approval": {"timeoutSeconds": 5}},
        },
    )
    wait_for(
        lambda: status_of(get(api, ns.name, "toolpolicies", "short-waits")).get("valid"),
        timeout=30,
        what="policy valid",
    )
    again = agent.invoke("effect", {"id": "same"}, name="same-name")
    status = status_of(agent.wait(again, timeout=60))
    assert status["state"] == "Denied" and status["deniedStage"] == "approval", pretty(status)
    assert "no approval bound" in status["message"]
    bound = status_of(get(api, ns.name, "toolapprovals", approval))
    assert bound["boundUid"] != get(api, ns.name, "toolinvocations", again)["metadata"]["uid"]
    assert server.hits["/effect/same"] == 1


def test_an_agent_cannot_set_owner_references_finalizers_or_labels_on_an_invocation(
    api: client.ApiClient, ns: Namespace, agent: Agent
) -> None:
    descriptor(api, ns.name, "list-tools", kind="native", native={"name": "list-tools"})
    agent.grant(["list-tools"], ["read"])
    name = agent.invoke("list-tools", {})
    other = agent.invoke("list-tools", {})
    other_uid = get(api, ns.name, "toolinvocations", other)["metadata"]["uid"]
    patches: list[dict[str, Any]] = [
        {
            "metadata": {
                "ownerReferences": [
                    {
                        "apiVersion": f"{GROUP}/{VERSION}",
                        "kind": "ToolInvocation",
                        "name": other,
                        "uid": other_uid,
                    }
                ]
            }
        },
        {"metadata": {"finalizers": ["example.com/stuck"]}},
        {"metadata": {"labels": {"tooladapter.dev/frozen": "true"}}},
    ]
    for patch in patches:
        with pytest.raises(client.ApiException) as refused:
            custom(agent.api).patch_namespaced_custom_object(
                GROUP, VERSION, ns.name, "toolinvocations", name, patch
            )
        assert refused.value.status in (403, 422), refused.value.body
        body = str(refused.value.body)
        # Owner references may already be refused by OwnerReferencesPermissionEnforcement
        # (the agent cannot delete the owner), before the admission policy is asked.
        assert "cannot change after create" in body or (
            "ownerReferences" in patch["metadata"] and "cannot set an ownerRef" in body
        ), body
    # What the agent may still do: interrupt its own call.
    custom(agent.api).patch_namespaced_custom_object(
        GROUP, VERSION, ns.name, "toolinvocations", name, {"spec": {"interrupt": True}}
    )


def waiting_call(agent: Agent, tool: str, call_id: str, *, just_lifted: bool = False) -> str:
    """A call of `tool` waiting for its approval. `just_lifted`: a freeze, deny policy or
    revoked grant was lifted a moment ago, and a call that does not wait is judged on the
    operator's watch, which may hold the restriction a moment longer (fail closed): a call
    Denied meanwhile is made again, at most 20 times."""
    for _ in range(20 if just_lifted else 1):
        name = agent.invoke(tool, {"id": call_id})
        status = status_of(agent.wait(name, states={"AwaitingApproval", *TERMINAL}))
        if not (just_lifted and status["state"] == "Denied"):
            break
    assert status["state"] == "AwaitingApproval", pretty(status)
    return name


def test_what_changed_while_a_call_waited_denies_it_after_approval(
    api: client.ApiClient, ns: Namespace, agent: Agent, hits: str, server: Recorder
) -> None:
    effect_tool(api, ns.name, hits, "shared-write")
    agent.grant(["effect"], ["shared-write"])
    reviewer = reviewer_of(api, ns.name)
    core = client.CoreV1Api(api)
    rbac = client.RbacAuthorizationV1Api(api)

    # 1. The namespace was frozen while the call waited.
    frozen = waiting_call(agent, "effect", "frozen")
    core.patch_namespace(ns.name, {"metadata": {"labels": {"tooladapter.dev/frozen": "true"}}})
    wait_for(
        lambda: (core.read_namespace(ns.name).metadata.labels or {}).get("tooladapter.dev/frozen"),
        timeout=10,
        what="namespace frozen",
    )
    approve(reviewer, frozen)
    status = status_of(agent.wait(frozen))
    assert status["state"] == "Denied" and status["deniedStage"] == "classification", pretty(status)
    core.patch_namespace(ns.name, {"metadata": {"labels": {"tooladapter.dev/frozen": None}}})

    # 2. A deny policy was added while the call waited.
    denied = waiting_call(agent, "effect", "policy", just_lifted=True)
    create(
        api,
        ns.name,
        "toolpolicies",
        {
            "kind": "ToolPolicy",
            "metadata": {"name": "deny-effect"},
            "spec": {"tools": {"deny": [{"id": "effect", "reason": "change freeze"}]}},
        },
    )
    approve(reviewer, denied)
    status = status_of(agent.wait(denied))
    assert status["state"] == "Denied" and status["deniedStage"] == "policy", pretty(status)
    assert "change freeze" in status["message"]
    custom(api).delete_namespaced_custom_object(
        GROUP, VERSION, ns.name, "toolpolicies", "deny-effect"
    )

    # 3. The agent's grant was revoked while the call waited.
    revoked = waiting_call(agent, "effect", "revoked", just_lifted=True)
    for binding in rbac.list_namespaced_role_binding(ns.name).items:
        if binding.role_ref.kind == "Role" and binding.metadata.name.startswith("agent-1-tools"):
            rbac.delete_namespaced_role_binding(cast(str, binding.metadata.name), ns.name)
    approve(reviewer, revoked)
    status = status_of(agent.wait(revoked))
    assert status["state"] == "Denied" and status["deniedStage"] == "permission", pretty(status)
    agent.grant(["effect"], ["shared-write"])

    # 4. The descriptor changed under the same version while the call waited.
    changed = waiting_call(agent, "effect", "changed", just_lifted=True)
    approve(reviewer, changed)  # bound to the digest the reviewer saw ...
    status = status_of(agent.wait(changed))
    assert status["state"] == "Observed", pretty(status)
    moved = waiting_call(agent, "effect", "moved")
    custom(api).patch_namespaced_custom_object(
        GROUP,
        VERSION,
        ns.name,
        "tooldescriptors",
        "effect-1-0-0",
        {"spec": {"http": {"url": f"http://{hits}/elsewhere/{{id}}"}}},
    )
    approve(reviewer, moved)  # ... which the waiting call's status still shows: stale
    status = status_of(agent.wait(moved))
    assert status["state"] == "Denied", pretty(status)
    assert status["deniedStage"] == "validation" and "changed" in status["message"]
    assert server.hits == Counter({"/effect/changed": 1})


def test_deleting_a_running_call_leaves_its_receipt_and_event(
    api: client.ApiClient, ns: Namespace, agent: Agent, operator: OperatorProcess
) -> None:
    shell_tool(api, ns.name, "slow", side_effect_class="shared-write", timeout=120)
    agent.grant(["slow"], ["shared-write"])
    reviewer = reviewer_of(api, ns.name)
    name = agent.invoke("slow", {"command": "sleep 60"})
    agent.wait(name, states={"AwaitingApproval"})
    approve(reviewer, name)
    running = agent.wait(name, states={"Executing"}, timeout=120)
    assert "tooladapter.dev/settle" in running["metadata"]["finalizers"]
    custom(api).delete_namespaced_custom_object(GROUP, VERSION, ns.name, "toolinvocations", name)

    def gone() -> bool:
        try:
            get(api, ns.name, "toolinvocations", name)
        except client.ApiException as exc:
            return exc.status == 404
        return False

    wait_for(gone, timeout=120, what="deleted invocation settled and gone")
    reasons = events_of(api, ns.name, name)
    assert "ToolEffectUncertain" in reasons or "ToolInvoked" in reasons, reasons
    stored = [
        parse_receipt(p.read_bytes())
        for p in (operator.artifacts / "sha256").rglob("*")
        if p.is_file()
    ]
    mine = [r for r in stored if r is not None and r.get("invocationName") == name]
    assert mine and mine[-1]["state"] in ("Uncertain", "Cancelled"), mine


def test_confirming_an_effect_did_not_happen_frees_its_key_for_one_new_execution(
    api: client.ApiClient,
    ns: Namespace,
    agent: Agent,
    operator: OperatorProcess,
    hits: str,
    server: Recorder,
) -> None:
    shell_tool(api, ns.name, "slow", side_effect_class="shared-write", timeout=120)
    effect_tool(api, ns.name, hits, "external")
    agent.grant(["slow", "effect"], ["shared-write", "external"])
    reviewer = reviewer_of(api, ns.name)
    first = agent.invoke("slow", {"command": "sleep 60"}, idempotencyKey="k-1")
    agent.wait(first, states={"AwaitingApproval"})
    approve(reviewer, first)
    agent.wait(first, states={"Executing"}, timeout=120)
    uid = get(api, ns.name, "toolinvocations", first)["metadata"]["uid"]
    wait_for(
        lambda: any(
            p.status.phase == "Running"
            and any(c.state.running for c in p.status.container_statuses or [])
            for p in client.CoreV1Api(api)
            .list_namespaced_pod(ns.name, label_selector=f"tooladapter.dev/invocation-uid={uid}")
            .items
        ),
        timeout=120,
        what="the tool running in its pod",
    )
    # The caller interrupts after the tool started: an effect may have happened.
    custom(agent.api).patch_namespaced_custom_object(
        GROUP, VERSION, ns.name, "toolinvocations", first, {"spec": {"interrupt": True}}
    )
    status = status_of(agent.wait(first, timeout=120))
    assert status["state"] == "Uncertain", pretty(status)

    # A duplicate while Uncertain: ends as its first call did, carrying its receipt, and is
    # never an unconfirmed effect of its own.
    dup = agent.invoke("slow", {"command": "sleep 60"}, idempotencyKey="k-1")
    dup_status = status_of(agent.wait(dup))
    assert (dup_status["state"], dup_status["duplicateOf"]) == ("Uncertain", first), pretty(
        dup_status
    )
    assert dup_status["receiptRef"] == status["receiptRef"]

    operations = Agent.create(api, ns.name, "ops", role="tooladapter-operations")
    confirm_effect(
        operations,
        ns.name,
        first,
        happened=False,
        evidence="the job was deleted before it wrote anything",
    )
    wait_for(
        lambda: (
            status_of(get(api, ns.name, "toolinvocations", first))
            .get("effectConfirmation", {})
            .get("recorded")
        ),
        timeout=30,
        what="confirmation recorded",
    )
    confirmed = status_of(get(api, ns.name, "toolinvocations", first))
    assert confirmed["execution"]["commandLine"] == ["sleep", "60"], pretty(confirmed)
    # The key is free: one new call with it runs once; a second is its duplicate.
    again = agent.invoke("effect", {"id": "k1"}, idempotencyKey="k-1")
    agent.wait(again, states={"AwaitingApproval"})
    approve(reviewer, again)
    retry = status_of(agent.wait(again, timeout=60))
    assert retry["state"] == "Observed" and not retry.get("duplicateOf"), pretty(retry)
    twice = status_of(agent.wait(agent.invoke("effect", {"id": "k1"}, idempotencyKey="k-1")))
    assert twice["state"] == "Observed" and twice["duplicateOf"] == again, pretty(twice)
    assert twice["receiptRef"] == retry["receiptRef"]
    assert server.hits["/effect/k1"] == 1


def test_retry_policy_runs_again_only_what_provably_never_left_the_operator(
    api: client.ApiClient, ns: Namespace, agent: Agent
) -> None:
    host = node_ip()
    closed = free_port(host)  # nothing listens: every attempt is refused before sending
    descriptor(
        api,
        ns.name,
        "refused",
        kind="http",
        inputSchema={"type": "object"},
        http={
            "method": "GET",
            "url": f"http://{host}:{closed}/x",
            "allowedHosts": [f"{host}:{closed}"],
        },
        retryPolicy={"maxAttempts": 3, "backoffSeconds": 0},
    )
    agent.grant(["refused"], ["read"])
    status = status_of(agent.wait(agent.invoke("refused", {})))
    assert status["state"] == "Failed" and status["failureClass"] == "transient", pretty(status)
    retries = [s for s in status["stages"] if s["outcome"] == "retry"]
    assert [r["detail"].split(" in ")[0] for r in retries] == ["attempt 2 of 3", "attempt 3 of 3"]
    assert status["execution"]["attempts"] == 3
