"""Attacks on the call semantics of issue 27, made as an agent would (a ServiceAccount bound
to `tooladapter-requester`, tools granted by RBAC), on the real cluster: getting an effect
run twice past the `unconfirmed-effect` block, forging or borrowing another call's duplicate
outcome, making a duplicate wait forever, reading another caller's calls through the block's
messages, blocking another tenant, and confusing the copy of confirmations onto duplicates.

What the product resists stays here as a regression test; what it does not is a test of the
correct behaviour (each was a hit of the attack pass, fixed since: the block keys on the
effect hash, and a refused retry frees its idempotency key)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from kubernetes import client

from tests.integration.objects import (
    SHELL_SCHEMA,
    Agent,
    approve,
    confirm_effect,
    create,
    custom,
    descriptor,
    get,
    pretty,
    shell_tool,
    status_of,
)
from tests.integration.servers import Recorder, recording_server
from tooladapter import GROUP, VERSION
from tooladapter.devtools import Namespace, wait_for

LOOPBACK = "127.0.0.1"
#: Amounts at or below this run without an approval (the tenant's spend policy).
SPEND_THRESHOLD = 100
#: What a spend call's server sees: one path per payment.
PAY_SCHEMA = {
    "type": "object",
    "properties": {"to": {"type": "string"}, "amount": {"type": "number"}},
    "required": ["to", "amount"],
}


# --------------------------------------------------------------------------- builders


def spend_policy(api: client.ApiClient, namespace: str) -> None:
    create(
        api,
        namespace,
        "toolpolicies",
        {
            "kind": "ToolPolicy",
            "metadata": {"name": "small-payments"},
            "spec": {"spend": {"argument": "amount", "threshold": SPEND_THRESHOLD}},
        },
    )
    wait_for(
        lambda: status_of(get(api, namespace, "toolpolicies", "small-payments")).get("valid"),
        timeout=30,
        what="spend policy valid",
    )


def pay_tool(
    api: client.ApiClient,
    namespace: str,
    port: int,
    *,
    version: str = "1.0.0",
    schema: dict[str, Any] | None = None,
) -> None:
    """A spend-class HTTP tool ("pay"): POST /pay/{to} with the amount in a JSON body. Calls
    at or under the threshold run with no person in the loop: exactly where a second run
    of an Uncertain payment must be refused by the product itself."""
    descriptor(
        api,
        namespace,
        "pay",
        kind="http",
        side_effect_class="spend",
        version=version,
        timeoutSeconds=3,
        inputSchema=schema or PAY_SCHEMA,
        http={
            "method": "POST",
            "url": f"http://{LOOPBACK}:{port}/pay/{{to}}",
            "headers": {"Content-Type": "application/json"},
            "body": '{"amount": {amount}}',
            "allowedHosts": [f"{LOOPBACK}:{port}"],
        },
    )


def external_tool(api: client.ApiClient, namespace: str, port: int) -> None:
    """An approval-gated HTTP tool ("deploy"): POST /deploy/{id}."""
    descriptor(
        api,
        namespace,
        "deploy",
        kind="http",
        side_effect_class="external",
        timeoutSeconds=3,
        inputSchema={
            "type": "object",
            "properties": {"id": {"type": "string"}},
            "additionalProperties": False,
        },
        http={
            "method": "POST",
            "url": f"http://{LOOPBACK}:{port}/deploy/{{id}}",
            "allowedHosts": [f"{LOOPBACK}:{port}"],
        },
    )


@contextmanager
def held_server() -> Iterator[Recorder]:
    """A server that takes the first request and never answers it (until the test ends):
    its call sent its request and saw no answer, so it ends Uncertain."""
    release = threading.Event()
    try:
        with recording_server(LOOPBACK, hold_first=release) as server:
            yield server
    finally:
        release.set()


def invocation(api: client.ApiClient, namespace: str, name: str) -> dict[str, Any]:
    return get(api, namespace, "toolinvocations", name)


def wait_state(
    api: client.ApiClient,
    namespace: str,
    name: str,
    states: set[str] | None = None,
    timeout: float = 120,
) -> dict[str, Any]:
    """The invocation's status once its state is in `states` (any terminal state), read
    with `api` (an admin's: some callers here may not read invocations)."""
    wanted = states or {"Observed", "Failed", "Uncertain", "Cancelled", "Denied", "Previewed"}

    def done() -> dict[str, Any] | None:
        status = status_of(invocation(api, namespace, name))
        return status if status.get("state") in wanted else None

    return wait_for(done, timeout=timeout, what=f"{name} in {sorted(wanted)}")


def uncertain_payment(
    api: client.ApiClient, namespace: str, agent: Agent, server: Recorder, **spec: Any
) -> str:
    """A payment of 5 to "bob" that reached the server and saw no answer: Uncertain."""
    first = agent.invoke("pay", {"to": "bob", "amount": 5}, **spec)
    status = status_of(agent.wait(first, timeout=60))
    assert status["state"] == "Uncertain", pretty(status)
    assert server.hits["/pay/bob"] == 1
    return first


def payments_setup(api: client.ApiClient, namespace: str, agent: Agent, port: int) -> None:
    spend_policy(api, namespace)
    pay_tool(api, namespace, port)
    agent.grant(["pay"], ["spend"])


def recorded(api: client.ApiClient, namespace: str, name: str) -> dict[str, Any]:
    return wait_for(
        lambda: (
            s
            if (s := status_of(invocation(api, namespace, name)))
            .get("effectConfirmation", {})
            .get("recorded")
            else None
        ),
        timeout=30,
        what=f"confirmation of {name} recorded",
    )


def blind_agent(api: client.ApiClient, namespace: str, name: str) -> Agent:
    """An agent that may create invocations and nothing else of tooladapter (it cannot read
    them back): messages must not name other callers' calls to it."""
    agent = Agent.create(api, namespace, name, role="tooladapter-class-read")
    rbac = client.RbacAuthorizationV1Api(api)
    rbac.create_namespaced_role(
        namespace,
        {  # type: ignore[arg-type]  # the client sends a dict body as is
            "metadata": {"name": f"{name}-create-only"},
            "rules": [
                {"apiGroups": [GROUP], "resources": ["toolinvocations"], "verbs": ["create"]}
            ],
        },
    )
    rbac.create_namespaced_role_binding(
        namespace,
        {  # type: ignore[arg-type]  # the client sends a dict body as is
            "metadata": {"name": f"{name}-create-only"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": f"{name}-create-only",
            },
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
        },
    )
    return agent


def create_as(agent: Agent, tool: str, arguments: dict[str, Any], **spec: Any) -> str:
    """`agent.invoke`, retried while the agent's RoleBinding is not effective yet."""

    def made() -> str | None:
        try:
            return agent.invoke(tool, arguments, **spec)
        except client.ApiException as exc:
            if exc.status == 403 and "spec.caller" not in str(exc.body):
                return None
            raise

    return wait_for(made, timeout=30, what=f"{agent.user} may create invocations")


# --------------------------------------------------------------------------- held


def test_spellings_of_the_same_request_and_other_callers_are_blocked_but_other_tenants_are_not(
    api: client.ApiClient, ns: Namespace, agent: Agent
) -> None:
    """Key order, 5 vs 5.0, a new key or none, another caller of the namespace, a dry run:
    all meet the block; a caller who may not read invocations is not told the call's name;
    the same request in another namespace is another tenant's and runs."""
    other_ns = Namespace(api)
    try:
        with held_server() as server:
            payments_setup(api, ns.name, agent, server.port)
            first = uncertain_payment(api, ns.name, agent, server)

            spellings: list[dict[str, Any]] = [
                {"amount": 5, "to": "bob"},
                {"to": "bob", "amount": 5.0},
                {"to": "bob", "amount": 5.000000000000000001},
            ]
            for i, arguments in enumerate(spellings):
                extras: tuple[dict[str, Any], ...] = ({"idempotencyKey": f"fresh-key-{i}"}, {})
                for extra in extras:
                    status = status_of(agent.wait(agent.invoke("pay", arguments, **extra)))
                    assert (status["state"], status["failureClass"]) == (
                        "Denied",
                        "unconfirmed-effect",
                    ), pretty(status)
                    assert status["deniedStage"] == "idempotency"
                    assert first in status["message"]

            # Another caller of the namespace, who may not read invocations: blocked (by
            # design, the block is per request, any caller), and not told which call.
            blind = blind_agent(api, ns.name, "blind")
            blind.grant(["pay"], ["spend"])
            name = create_as(blind, "pay", {"to": "bob", "amount": 5})
            status = wait_state(api, ns.name, name)
            assert (status["state"], status["failureClass"]) == (
                "Denied",
                "unconfirmed-effect",
            ), pretty(status)
            assert first not in status["message"] and "an earlier call" in status["message"]
            dry = create_as(blind, "pay", {"to": "bob", "amount": 5}, dryRun=True)
            preview = wait_state(api, ns.name, dry)
            assert "unconfirmed-effect" in pretty(preview), pretty(preview)
            assert first not in pretty(preview)

            # The same tool, version and arguments in another tenant's namespace: its own.
            other = Agent.create(api, other_ns.name, "agent-1")
            payments_setup(api, other_ns.name, other, server.port)
            elsewhere = status_of(other.wait(other.invoke("pay", {"to": "bob", "amount": 5})))
            assert elsewhere["state"] == "Observed", pretty(elsewhere)
            assert server.hits["/pay/bob"] == 2  # the held first one, and the other tenant's
    finally:
        other_ns.delete()


def test_a_call_waiting_for_approval_when_its_twin_turns_uncertain_never_runs(
    api: client.ApiClient, ns: Namespace, agent: Agent
) -> None:
    """B was received (and passed the receive-time check) before A was even approved; A
    then ends Uncertain; B's approval arrives: the check right before acting refuses it."""
    with held_server() as server:
        external_tool(api, ns.name, server.port)
        agent.grant(["deploy"], ["external"])
        reviewer = Agent.create(api, ns.name, "reviewer-1", role="tooladapter-reviewer")
        first = agent.invoke("deploy", {"id": "x"})
        second = agent.invoke("deploy", {"id": "x"}, idempotencyKey="another")
        agent.wait(first, states={"AwaitingApproval"})
        agent.wait(second, states={"AwaitingApproval"})
        approve(reviewer, first)
        assert status_of(agent.wait(first, timeout=60))["state"] == "Uncertain"

        approve(reviewer, second)
        status = status_of(agent.wait(second, timeout=60))

        assert (status["state"], status["failureClass"]) == (
            "Denied",
            "unconfirmed-effect",
        ), pretty(status)
        assert status["deniedStage"] == "idempotency"
        assert "execution" not in status or not status["execution"], pretty(status)
        assert server.total == 1


def test_a_key_is_per_caller_and_an_agent_cannot_forge_a_duplicate_or_confirmation(
    api: client.ApiClient, ns: Namespace, agent: Agent
) -> None:
    """Agent B using agent A's key (same arguments, other arguments) gets its own call: never
    A's result, receipt or name through duplicateOf or a key-reused message. B cannot write
    status (duplicateOf, effectConfirmation) at create or by patch."""
    with recording_server(LOOPBACK) as server:
        descriptor(
            api,
            ns.name,
            "lookup",
            kind="http",
            side_effect_class="read",
            inputSchema={"type": "object", "properties": {"id": {"type": "string"}}},
            http={
                "method": "GET",
                "url": f"http://{LOOPBACK}:{server.port}/lookup/{{id}}",
                "allowedHosts": [f"{LOOPBACK}:{server.port}"],
            },
        )
        agent.grant(["lookup"], ["read"])
        other = Agent.create(api, ns.name, "agent-2")
        other.grant(["lookup"], ["read"])
        first = agent.invoke("lookup", {"id": "secret-a"}, idempotencyKey="shared")
        a = status_of(agent.wait(first))
        assert a["state"] == "Observed", pretty(a)

        same = status_of(
            other.wait(other.invoke("lookup", {"id": "secret-a"}, idempotencyKey="shared"))
        )
        third = Agent.create(api, ns.name, "agent-3")
        third.grant(["lookup"], ["read"])
        diff = status_of(third.wait(third.invoke("lookup", {"id": "b"}, idempotencyKey="shared")))
        assert same["state"] == "Observed" and not same.get("duplicateOf"), pretty(same)
        assert same["receiptRef"] != a["receiptRef"]
        assert diff["state"] == "Observed" and not diff.get("duplicateOf"), pretty(diff)
        assert first not in pretty(diff) and a["requestHash"] not in pretty(diff)
        assert server.hits["/lookup/secret-a"] == 2 and server.hits["/lookup/b"] == 1

        # Status written at create is dropped; status and metadata patches are refused.
        forged = "forged-call"
        create(
            other.api,
            ns.name,
            "toolinvocations",
            {
                "kind": "ToolInvocation",
                "metadata": {"name": forged},
                "spec": {
                    "tool": {"id": "lookup", "version": "1.0.0"},
                    "arguments": {"id": "c"},
                    "caller": {"kind": "agent", "name": other.user},
                    "idempotencyKey": "forged",
                },
                "status": {
                    "state": "Observed",
                    "duplicateOf": first,
                    "duplicateOfUid": get(api, ns.name, "toolinvocations", first)["metadata"][
                        "uid"
                    ],
                    "receiptRef": a["receiptRef"],
                },
            },
        )
        done = status_of(other.wait(forged))
        assert done["state"] == "Observed" and not done.get("duplicateOf"), pretty(done)
        assert done["receiptRef"] != a["receiptRef"]
        assert server.hits["/lookup/c"] == 1
        for patch in (
            {"status": {"duplicateOf": first, "duplicateOfUid": "x"}},
            {"status": {"effectConfirmation": {"effectHappened": False}}},
        ):
            with pytest.raises(client.ApiException) as refused:
                custom(other.api).patch_namespaced_custom_object_status(
                    GROUP, VERSION, ns.name, "toolinvocations", forged, patch
                )
            assert refused.value.status == 403
        with pytest.raises(client.ApiException) as relabel:
            custom(other.api).patch_namespaced_custom_object(
                GROUP,
                VERSION,
                ns.name,
                "toolinvocations",
                first,
                {"metadata": {"annotations": {"tooladapter.dev/invocation": forged}}},
            )
        assert relabel.value.status == 403


def test_a_duplicate_whose_first_call_is_deleted_ends_instead_of_waiting_forever(
    api: client.ApiClient, ns: Namespace, agent: Agent
) -> None:
    with held_server() as server:
        external_tool(api, ns.name, server.port)
        agent.grant(["deploy"], ["external"])
        first = agent.invoke("deploy", {"id": "x"}, idempotencyKey="k")
        agent.wait(first, states={"AwaitingApproval"})
        duplicate = agent.invoke("deploy", {"id": "x"}, idempotencyKey="k")
        wait_for(
            lambda: status_of(invocation(api, ns.name, duplicate)).get("duplicateOf") == first,
            timeout=30,
            what="the duplicate names its first call",
        )
        assert status_of(invocation(api, ns.name, duplicate)).get("state") in (None, "Received")

        custom(api).delete_namespaced_custom_object(
            GROUP, VERSION, ns.name, "toolinvocations", first
        )
        # The watch wakes it; WINNER_POLL_SECONDS (30) bounds it otherwise.
        status = status_of(agent.wait(duplicate, timeout=90))
        assert (status["state"], status["failureClass"]) == ("Denied", "duplicate"), pretty(status)
        assert server.total == 0


def test_a_duplicate_cannot_be_confirmed_and_carries_its_first_calls_confirmation(
    api: client.ApiClient, ns: Namespace, agent: Agent
) -> None:
    with held_server() as server:
        payments_setup(api, ns.name, agent, server.port)
        first = uncertain_payment(api, ns.name, agent, server, idempotencyKey="k")
        duplicate = agent.invoke("pay", {"to": "bob", "amount": 5}, idempotencyKey="k")
        dup = status_of(agent.wait(duplicate))
        assert (dup["state"], dup["duplicateOf"]) == ("Uncertain", first), pretty(dup)
        assert dup["receiptRef"] == status_of(invocation(api, ns.name, first))["receiptRef"]

        operations = Agent.create(api, ns.name, "ops", role="tooladapter-operations")
        wait_for(
            lambda: _may_patch_status(operations, ns.name),
            timeout=30,
            what="operations role effective",
        )
        with pytest.raises(client.ApiException) as refused:
            confirm_effect(operations, ns.name, duplicate, happened=True)
        assert refused.value.status in (403, 422), refused.value
        assert "duplicate" in str(refused.value.body)
        # The agent itself may not confirm its own call.
        with pytest.raises(client.ApiException) as own:
            confirm_effect(agent, ns.name, first, happened=False, evidence="trust me")
        assert own.value.status == 403

        confirm_effect(operations, ns.name, first, happened=True, evidence="bob was paid")
        recorded(api, ns.name, first)
        copied = wait_for(
            lambda: (
                s
                if (s := status_of(invocation(api, ns.name, duplicate))).get("failureClass")
                == "effect-confirmed"
                else None
            ),
            timeout=30,
            what="confirmation copied onto the duplicate",
        )
        assert copied["effectConfirmation"]["confirmedBy"] == operations.user, pretty(copied)
        assert copied["effectConfirmation"]["recorded"] is True
        assert copied["duplicateOf"] == first and copied["state"] == "Uncertain"
        # Confirmed: a new call of the request runs (once), the key's duplicates do not.
        again = status_of(agent.wait(agent.invoke("pay", {"to": "bob", "amount": 5})))
        assert again["state"] == "Observed", pretty(again)
        later = status_of(
            agent.wait(agent.invoke("pay", {"to": "bob", "amount": 5}, idempotencyKey="k"))
        )
        assert later["duplicateOf"] == first, pretty(later)
        assert server.hits["/pay/bob"] == 2


def _may_patch_status(agent: Agent, namespace: str) -> bool:
    review = client.AuthorizationV1Api(agent.admin).create_subject_access_review(
        {  # type: ignore[arg-type]  # the client sends a dict body as is
            "spec": {
                "user": agent.user,
                "resourceAttributes": {
                    "namespace": namespace,
                    "verb": "patch",
                    "group": GROUP,
                    "resource": "toolinvocations",
                    "subresource": "status",
                },
            }
        }
    )
    return bool(review.status.allowed)


# --------------------------------------------------------------------------- hits


def test_an_argument_the_tool_never_sees_does_not_let_an_uncertain_payment_run_again(
    api: client.ApiClient, ns: Namespace, agent: Agent
) -> None:
    """The descriptor's schema allows other properties (JSON Schema's default) and its HTTP
    template uses only `to` and `amount`: `{"to": "bob", "amount": 5, "memo": "retry"}` is
    on the wire byte for byte the request that is Uncertain, yet it hashes differently."""
    with held_server() as server:
        payments_setup(api, ns.name, agent, server.port)
        uncertain_payment(api, ns.name, agent, server)

        retry = agent.invoke("pay", {"to": "bob", "amount": 5, "memo": "retry"})
        status = status_of(agent.wait(retry, timeout=60))

        assert server.hits["/pay/bob"] == 1, f"the payment reached the server again: {server.paths}"
        assert (status["state"], status["failureClass"]) == (
            "Denied",
            "unconfirmed-effect",
        ), pretty(status)


def test_another_active_version_of_the_tool_does_not_let_an_uncertain_payment_run_again(
    api: client.ApiClient, ns: Namespace, agent: Agent
) -> None:
    with held_server() as server:
        payments_setup(api, ns.name, agent, server.port)
        pay_tool(api, ns.name, server.port, version="1.0.1")  # the same request, republished
        uncertain_payment(api, ns.name, agent, server)

        retry = agent.invoke("pay", {"to": "bob", "amount": 5}, version="1.0.1")
        status = status_of(agent.wait(retry, timeout=60))

        assert server.hits["/pay/bob"] == 1, f"the payment reached the server again: {server.paths}"
        assert (status["state"], status["failureClass"]) == (
            "Denied",
            "unconfirmed-effect",
        ), pretty(status)


def test_a_shell_command_spelled_with_other_whitespace_or_quotes_does_not_run_again(
    api: client.ApiClient, ns: Namespace, agent: Agent
) -> None:
    """A shared-write shell tool (schema with additionalProperties false): `sleep 60` past
    its 5 s timeout is Uncertain; the same argv spelled otherwise must meet the block."""
    shell_tool(api, ns.name, "sh", side_effect_class="shared-write", timeout=5)
    agent.grant(["sh"], ["shared-write"])
    reviewer = Agent.create(api, ns.name, "reviewer-1", role="tooladapter-reviewer")
    first = agent.invoke("sh", {"command": "sleep 60"})
    agent.wait(first, states={"AwaitingApproval"})
    approve(reviewer, first)
    uncertain = status_of(agent.wait(first, timeout=120))
    assert uncertain["state"] == "Uncertain", pretty(uncertain)
    assert SHELL_SCHEMA["additionalProperties"] is False

    retry = agent.invoke("sh", {"command": "sleep  60"})
    status = status_of(agent.wait(retry, states={"AwaitingApproval", "Denied"}))
    if status["state"] == "AwaitingApproval":
        # A reviewer sees a new request (a new hash) and approves it: it runs again.
        approve(reviewer, retry)
        status = status_of(agent.wait(retry, timeout=120))
    assert (status["state"], status["failureClass"]) == (
        "Denied",
        "unconfirmed-effect",
    ), pretty(status)


def test_a_retry_refused_while_uncertain_runs_once_with_its_key_after_confirmation(
    api: client.ApiClient, ns: Namespace, agent: Agent
) -> None:
    """The message says "then make the call again"; a client does, with the same key."""
    with held_server() as server:
        payments_setup(api, ns.name, agent, server.port)
        first = uncertain_payment(api, ns.name, agent, server)
        refused = status_of(
            agent.wait(agent.invoke("pay", {"to": "bob", "amount": 5}, idempotencyKey="k-2"))
        )
        assert refused["failureClass"] == "unconfirmed-effect", pretty(refused)

        operations = Agent.create(api, ns.name, "ops", role="tooladapter-operations")
        confirm_effect(operations, ns.name, first, happened=False, evidence="bob got nothing")
        recorded(api, ns.name, first)

        again = status_of(
            agent.wait(agent.invoke("pay", {"to": "bob", "amount": 5}, idempotencyKey="k-2"))
        )
        assert again["state"] == "Observed", pretty(again)
        assert server.hits["/pay/bob"] == 2
