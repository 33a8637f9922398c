"""Issue 27, a descriptor's lifecycle on the real cluster: the operator's default timeout
for a descriptor that sets none, retirement with an in-flight policy and its events,
extended resources on the sandbox Job, the sandbox-seconds meter, and a class denial that
names the escalation."""

from __future__ import annotations

import re
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest
from kubernetes import client

from tests.integration.conftest import Configured
from tests.integration.objects import (
    SHELL_SCHEMA,
    TERMINAL,
    TEST_SHELL_ALLOW,
    Agent,
    container_tool,
    custom,
    descriptor,
    events_of,
    get,
    jobs_of,
    pretty,
    shell_tool,
    status_of,
)
from tooladapter import GROUP, VERSION
from tooladapter.devtools import Namespace, OperatorProcess, wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]

#: The operator's default timeout in this module: far below any CRD or code default.
DEFAULT_TIMEOUT = 20
#: The operator's result bound in this module: above the 1 MiB the CRD used to fill in.
MAX_RESULT_BYTES = 2 * 1_048_576


@pytest.fixture(scope="module")
def lifecycle(configured: Callable[[Mapping[str, str]], Configured]) -> Configured:
    return configured(
        {
            "TOOLADAPTER_DEFAULT_TIMEOUT_SECONDS": str(DEFAULT_TIMEOUT),
            "TOOLADAPTER_MAX_RESULT_BYTES": str(MAX_RESULT_BYTES),
        }
    )


@pytest.fixture(scope="module")
def operator(lifecycle: Configured) -> OperatorProcess:
    return lifecycle.operator


@pytest.fixture
def ns(api: client.ApiClient, lifecycle: Configured) -> Iterator[Namespace]:
    namespace = lifecycle.namespace(api)
    yield namespace
    namespace.delete()


def patch(api: client.ApiClient, namespace: str, plural: str, name: str, body: Any) -> None:
    custom(api).patch_namespaced_custom_object(GROUP, VERSION, namespace, plural, name, body)


def sandbox(limits: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "resources": {
            "requests": {"cpu": "50m", "memory": "64Mi"},
            "limits": {"cpu": "500m", "memory": "64Mi", **(limits or {})},
        },
        "egress": {"allow": []},
    }


def pod_running(api: client.ApiClient, namespace: str, uid: str) -> bool:
    pods = client.CoreV1Api(api).list_namespaced_pod(
        namespace, label_selector=f"tooladapter.dev/invocation-uid={uid}"
    )
    return any(any(c.state.running for c in p.status.container_statuses or []) for p in pods.items)


def metric(op: OperatorProcess, name: str, tenant: str) -> float | None:
    with urllib.request.urlopen(f"http://127.0.0.1:{op.metrics_port}/metrics", timeout=10) as r:
        text = r.read().decode()
    found = re.search(rf'^{name}\{{tenant="{re.escape(tenant)}"\}} (\S+)$', text, re.M)
    return float(found.group(1)) if found else None


# --------------------------------------------------------------------------- timeout, meter


def test_a_descriptor_without_a_result_bound_follows_the_setting_raised_above_one_mebibyte(
    api: client.ApiClient, ns: Namespace, agent: Agent
) -> None:
    size = 1_500_000  # above the CRD's old 1 MiB default, below the setting
    obj = container_tool(
        api, ns.name, "big", ["sh", "-c", f"head -c {size} /dev/zero | tr '\\0' a"]
    )
    name = obj["metadata"]["name"]
    stored = get(api, ns.name, "tooldescriptors", name)
    assert "maxResultBytes" not in stored["spec"], pretty(stored["spec"])
    shown = wait_for(
        lambda: status_of(get(api, ns.name, "tooldescriptors", name)).get(
            "effectiveMaxResultBytes"
        ),
        timeout=30,
        what="effectiveMaxResultBytes",
    )
    assert shown == MAX_RESULT_BYTES
    agent.grant(["big"], ["sandbox"])

    done = status_of(agent.wait(agent.invoke("big", {}), timeout=120))

    assert done["state"] == "Observed", pretty(done)
    assert done["result"]["originalBytes"] == size, pretty(done["result"])
    assert done["result"]["truncated"] is False, pretty(done["result"])


def test_a_descriptor_without_timeout_obeys_the_setting_and_sandbox_seconds_are_metered(
    api: client.ApiClient, ns: Namespace, agent: Agent, operator: OperatorProcess
) -> None:
    obj = descriptor(
        api,
        ns.name,
        "sh",
        kind="shell",
        side_effect_class="sandbox",
        inputSchema=SHELL_SCHEMA,
        shell={"allow": list(TEST_SHELL_ALLOW)},
        sandbox=sandbox(),
    )
    name = obj["metadata"]["name"]
    # No CRD default fills it in any more; the status shows what calls get.
    stored = get(api, ns.name, "tooldescriptors", name)
    assert "timeoutSeconds" not in stored["spec"], pretty(stored["spec"])
    assert status_of(stored)["effectiveTimeoutSeconds"] == DEFAULT_TIMEOUT, pretty(stored)
    agent.grant(["sh"], ["sandbox"])

    slow = agent.invoke("sh", {"command": "sleep 120"})
    ended = status_of(agent.wait(slow, timeout=90))
    assert ended["state"] == "Failed", pretty(ended)
    assert ended["failureClass"] == "timeout", pretty(ended)
    assert ended["sandboxLease"]["limits"]["timeoutSeconds"] == DEFAULT_TIMEOUT
    assert f"timeout of {DEFAULT_TIMEOUT}s" in ended["message"], pretty(ended)

    quick = agent.invoke("sh", {"command": "sleep 1"})
    done = status_of(agent.wait(quick, timeout=120))
    assert done["state"] == "Observed", pretty(done)
    seconds = done["execution"]["sandboxSeconds"]
    assert 1 <= seconds < DEFAULT_TIMEOUT, pretty(done)
    counted = wait_for(
        lambda: metric(operator, "tooladapter_sandbox_seconds_total", ns.name),
        timeout=10,
        what="tooladapter_sandbox_seconds_total of the tenant",
    )
    assert counted >= seconds


# --------------------------------------------------------------------------- retirement


def test_retiring_with_cancel_interrupts_a_running_call_and_denies_a_waiting_one(
    api: client.ApiClient, ns: Namespace, agent: Agent
) -> None:
    obj = shell_tool(api, ns.name, "sh", timeout=120)
    name = obj["metadata"]["name"]
    # `date` is on no allow-list entry: raised to shared-write, it waits for an approval.
    agent.grant(["sh"], ["sandbox", "shared-write"])
    running = agent.invoke("sh", {"command": "sleep 100"})
    waiting = agent.invoke("sh", {"command": "date"})
    agent.wait(waiting, states={"AwaitingApproval"})
    agent.wait(running, states={"Executing"})
    uid = get(api, ns.name, "toolinvocations", running)["metadata"]["uid"]
    wait_for(lambda: pod_running(api, ns.name, uid), timeout=120, what="the tool's pod running")

    patch(
        api,
        ns.name,
        "tooldescriptors",
        name,
        {"spec": {"retired": True, "retirement": {"inFlight": "Cancel"}}},
    )

    denied = status_of(agent.wait(waiting, timeout=30))
    assert denied["state"] == "Denied", pretty(denied)
    assert denied["failureClass"] == "retired", pretty(denied)
    interrupted = status_of(agent.wait(running, timeout=60))
    # A sandbox-class call's effects stay in its sandbox: an interrupt settles it Cancelled.
    assert interrupted["state"] == "Cancelled", pretty(interrupted)
    assert "ToolInvocationInterrupted" in events_of(api, ns.name, running)
    assert not any(
        j.metadata.labels.get("tooladapter.dev/invocation-uid") == uid
        for j in jobs_of(api, ns.name)
        if j.status.active
    )
    late = status_of(agent.wait(agent.invoke("sh", {"command": "echo hi"}), timeout=30))
    assert (late["state"], late["failureClass"]) == ("Denied", "retired"), pretty(late)

    reasons = wait_for(
        lambda: (lambda r: r if "ToolDescriptorRetired" in r else None)(
            events_of(api, ns.name, name)
        ),
        timeout=30,
        what="ToolDescriptorRetired on the descriptor",
    )
    assert "ToolDescriptorActivated" in reasons
    assert status_of(get(api, ns.name, "tooldescriptors", name))["active"] is False


def test_retiring_with_complete_lets_a_running_call_finish(
    api: client.ApiClient, ns: Namespace, agent: Agent
) -> None:
    obj = shell_tool(api, ns.name, "sh", timeout=120)
    agent.grant(["sh"], ["sandbox"])
    running = agent.invoke("sh", {"command": "sleep 5"})
    agent.wait(running, states={"Executing"})

    patch(api, ns.name, "tooldescriptors", obj["metadata"]["name"], {"spec": {"retired": True}})

    done = status_of(agent.wait(running, timeout=120))
    assert done["state"] == "Observed", pretty(done)
    late = status_of(agent.wait(agent.invoke("sh", {"command": "echo hi"}), timeout=30))
    assert late["failureClass"] == "retired", pretty(late)


# --------------------------------------------------------------------------- extended resources


def test_an_extended_resource_reaches_the_sandbox_job(
    api: client.ApiClient, ns: Namespace, agent: Agent
) -> None:
    descriptor(
        api,
        ns.name,
        "widget",
        kind="shell",
        side_effect_class="sandbox",
        inputSchema=SHELL_SCHEMA,
        shell={"allow": list(TEST_SHELL_ALLOW)},
        timeoutSeconds=60,
        sandbox=sandbox({"example.com/widget": 1}),
    )
    agent.grant(["widget"], ["sandbox"])
    call = agent.invoke("widget", {"command": "echo hi"})
    uid = get(api, ns.name, "toolinvocations", call)["metadata"]["uid"]

    def job() -> Any:
        return next(
            (
                j
                for j in jobs_of(api, ns.name)
                if j.metadata.labels.get("tooladapter.dev/invocation-uid") == uid
            ),
            None,
        )

    created = wait_for(job, timeout=60, what="the sandbox Job")
    tool = next(c for c in created.spec.template.spec.containers if c.name == "tool")
    assert tool.resources.limits["example.com/widget"] == "1"
    assert tool.resources.limits["cpu"] == "500m"
    # No node has the widget: the pod never schedules. The call is interrupted, and since
    # its tool never started, it ends Cancelled.
    patch(api, ns.name, "toolinvocations", call, {"spec": {"interrupt": True}})
    ended = status_of(agent.wait(call, timeout=60))
    assert ended["state"] == "Cancelled", pretty(ended)
    assert ended["sandboxLease"]["limits"]["extended"] == {"example.com/widget": "1"}


def test_the_api_server_refuses_a_resource_name_that_is_not_one(
    api: client.ApiClient, ns: Namespace
) -> None:
    with pytest.raises(client.ApiException) as refused:
        descriptor(
            api,
            ns.name,
            "bad",
            kind="shell",
            side_effect_class="sandbox",
            inputSchema=SHELL_SCHEMA,
            sandbox=sandbox({"gpu": 1}),
            wait_active=False,
        )
    assert refused.value.status == 422
    assert "extended resource" in str(refused.value.body)


# --------------------------------------------------------------------------- one message


def test_a_class_denial_of_an_escalated_command_names_the_escalation(
    api: client.ApiClient, ns: Namespace, agent: Agent
) -> None:
    shell_tool(api, ns.name, "sh")
    agent.grant(["sh"], ["sandbox"])  # not shared-write, where `date` is raised to

    denied = status_of(agent.wait(agent.invoke("sh", {"command": "date"}), timeout=30))

    assert denied["state"] == "Denied", pretty(denied)
    assert denied["deniedStage"] == "permission", pretty(denied)
    message = denied["message"]
    assert "may not use sideeffectclasses/shared-write" in message, message
    assert "not on the allow list" in message and "raised sandbox to shared-write" in message
    assert denied["state"] in TERMINAL
