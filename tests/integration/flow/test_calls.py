"""Issue 4: a tool call from `kubectl create` to receipt, on the real cluster."""

from __future__ import annotations

import hashlib
import json
import urllib.request
from collections.abc import Iterator

import pytest
from kubernetes import client

from tests.integration.objects import (
    Agent,
    create,
    descriptor,
    events_of,
    get,
    jobs_of,
    pretty,
    shell_tool,
    status_of,
)
from tests.integration.servers import recording_server
from tooladapter.devtools import Namespace, OperatorProcess, node_ip, wait_for
from tooladapter.receipts.core.check import parse_receipt

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def node_server() -> Iterator[tuple[str, int]]:
    """An HTTP server on the node's own address, for http tools and egress tests."""
    with recording_server(node_ip()) as server:
        yield server.host, server.port


def receipt_matches(op: OperatorProcess, ref: str) -> dict[str, object]:
    algo, _, digest = ref.partition(":")
    assert algo == "sha256"
    data = (op.artifacts / "sha256" / digest[:2] / digest).read_bytes()
    assert hashlib.sha256(data).hexdigest() == digest
    receipt = parse_receipt(data)  # a signed receipt's predicate
    assert receipt is not None, data[:200]
    return receipt


def test_native_http_and_shell_calls_reach_observed_with_receipts(
    api: client.ApiClient,
    ns: Namespace,
    agent: Agent,
    operator: OperatorProcess,
    node_server: tuple[str, int],
) -> None:
    host, port = node_server
    descriptor(api, ns.name, "list-tools", kind="native", native={"name": "list-tools"})
    descriptor(
        api,
        ns.name,
        "greet",
        kind="http",
        inputSchema={
            "type": "object",
            "properties": {"who": {"type": "string"}},
            "required": ["who"],
        },
        http={
            "method": "GET",
            "url": f"http://{host}:{port}/greet/{{who}}",
            "allowedHosts": [f"{host}:{port}"],
        },
    )
    shell_tool(api, ns.name, "sh")
    agent.grant(["list-tools", "greet", "sh"], ["read", "sandbox"])

    native = agent.wait(agent.invoke("list-tools", {}))
    http_call = agent.wait(agent.invoke("greet", {"who": "a b/c"}))
    shell = agent.wait(agent.invoke("sh", {"command": "echo hello from the sandbox"}))

    for obj in (native, http_call, shell):
        status = status_of(obj)
        assert status["state"] == "Observed", pretty(status)
        receipt = receipt_matches(operator, status["receiptRef"])
        assert receipt["state"] == "Observed"
        assert receipt["requestHash"] == status["requestHash"]
        assert [s["stage"] for s in status["stages"]][:4] == [
            "validation",
            "permission",
            "policy",
            "classification",
        ]
    tools = status_of(native)["result"]["structuredContent"]["tools"]
    assert {t["toolId"] for t in tools} == {"list-tools", "greet", "sh"}
    # The placeholder was URL-encoded: the space and the slash did not change the path.
    assert json.loads(status_of(http_call)["result"]["content"])["path"] == "/greet/a%20b%2Fc"
    assert status_of(shell)["result"]["content"].strip() == "hello from the sandbox"
    # TOOLADAPTER_EVENTS=actionable (the default): an Observed call's record is its receipt.
    assert "ToolInvoked" not in events_of(api, ns.name, shell["metadata"]["name"])
    assert "SandboxLeased" in events_of(api, ns.name, shell["metadata"]["name"])


def test_schema_invalid_arguments_and_unknown_versions_are_denied_at_validation(
    api: client.ApiClient,
    ns: Namespace,
    agent: Agent,
) -> None:
    descriptor(
        api,
        ns.name,
        "typed",
        kind="native",
        native={"name": "list-tools"},
        inputSchema={
            "type": "object",
            "properties": {
                "files": {
                    "type": "array",
                    "items": {"type": "object", "properties": {"name": {"type": "string"}}},
                }
            },
        },
    )
    agent.grant(["typed"], ["read"])
    bad_name = agent.invoke("typed", {"files": [{"name": "ok"}, {"name": 7}]})
    bad = status_of(agent.wait(bad_name))
    assert bad["state"] == "Denied" and bad["deniedStage"] == "validation"
    assert "$.files[1].name" in bad["message"], bad["message"]
    denied_events = wait_for(
        lambda: "ToolInvocationDenied" in events_of(api, ns.name, bad_name) or None,
        timeout=30,
        what="ToolInvocationDenied event",
    )
    assert denied_events
    unknown = status_of(agent.wait(agent.invoke("typed", {}, version="9.9.9")))
    assert unknown["state"] == "Denied" and unknown["deniedStage"] == "validation"
    assert "9.9.9" in unknown["message"]


def test_agent_without_a_grant_for_the_tool_or_the_class_is_denied_at_permission(
    api: client.ApiClient,
    ns: Namespace,
    agent: Agent,
) -> None:
    descriptor(api, ns.name, "list-tools", kind="native", native={"name": "list-tools"})
    no_tool = status_of(agent.wait(agent.invoke("list-tools", {})))
    assert no_tool["state"] == "Denied" and no_tool["deniedStage"] == "permission"
    assert "invoke tooldescriptors/list-tools" in no_tool["message"]
    agent.grant(["list-tools"], [])
    no_class = status_of(agent.wait(agent.invoke("list-tools", {})))
    assert no_class["state"] == "Denied" and no_class["deniedStage"] == "permission"
    assert "sideeffectclasses/read" in no_class["message"]


def test_an_agent_naming_another_caller_is_rejected_by_the_api_server(
    api: client.ApiClient,
    ns: Namespace,
    agent: Agent,
) -> None:
    def rejected() -> str | None:
        try:
            create(
                agent.api,
                ns.name,
                "toolinvocations",
                {
                    "kind": "ToolInvocation",
                    "metadata": {"generateName": "spoof-"},
                    "spec": {
                        "tool": {"id": "x", "version": "1.0.0"},
                        "caller": {"name": "system:serviceaccount:kube-system:admin"},
                    },
                },
            )
        except client.ApiException as exc:
            # Right after the agent's RoleBinding is made, RBAC may still refuse the create
            # (403 "cannot create"): only the admission policy's answer counts.
            body = str(exc.body)
            return body if exc.status in (400, 403, 422) and "spec.caller" in body else None
        raise AssertionError("the API server accepted a spoofed caller")

    message = wait_for(rejected, timeout=30, what="admission to reject a spoofed caller")
    assert "spec.caller.name must be the creating user" in message


def test_frozen_namespaces_production_namespaces_and_policy_deny_rules(
    api: client.ApiClient,
    operator: OperatorProcess,
) -> None:
    frozen = Namespace(api, {"tooladapter.dev/frozen": "true"})
    prod = Namespace(api, {"tooladapter.dev/environment-class": "production"})
    try:
        f_agent, p_agent = Agent.create(api, frozen.name, "a"), Agent.create(api, prod.name, "a")
        for space, who in ((frozen, f_agent), (prod, p_agent)):
            descriptor(
                api,
                space.name,
                "write",
                kind="native",
                native={"name": "list-tools"},
                side_effect_class="shared-write",
            )
            descriptor(
                api,
                space.name,
                "probe",
                kind="native",
                native={"name": "list-tools"},
                side_effect_class="external",
            )
            who.grant(["write", "probe"], ["shared-write", "external", "production"])
        refused = status_of(f_agent.wait(f_agent.invoke("write", {})))
        assert refused["state"] == "Denied" and refused["deniedStage"] == "classification"
        assert "frozen" in refused["message"]
        raised = status_of(
            p_agent.wait(
                p_agent.invoke("probe", {}), states={"AwaitingApproval", "Denied", "Observed"}
            )
        )
        assert raised["declaredClass"] == "external"
        assert raised["effectiveClass"] == "production", pretty(raised)

        create(
            api,
            prod.name,
            "toolpolicies",
            {
                "kind": "ToolPolicy",
                "metadata": {"name": "no-writes"},
                "spec": {
                    "tools": {
                        "deny": [
                            {"id": "write", "versions": ">=1.0", "reason": "change freeze week"}
                        ]
                    }
                },
            },
        )
        wait_for(
            lambda: status_of(get(api, prod.name, "toolpolicies", "no-writes")).get("valid"),
            timeout=30,
            what="policy valid",
        )
        denied = status_of(p_agent.wait(p_agent.invoke("write", {})))
        assert denied["state"] == "Denied" and denied["deniedStage"] == "policy"
        assert "change freeze week" in denied["message"] and "no-writes" in denied["message"]
        assert denied["policyDecisionId"]
    finally:
        frozen.delete()
        prod.delete()


def test_a_block_listed_shell_command_is_denied_before_any_job_exists(
    api: client.ApiClient,
    ns: Namespace,
    agent: Agent,
) -> None:
    shell_tool(api, ns.name, "sh")
    agent.grant(["sh"], ["sandbox", "production"])
    status = status_of(agent.wait(agent.invoke("sh", {"command": "rm -r -f /workspace"})))
    assert status["state"] == "Denied", pretty(status)
    assert status["deniedStage"] in ("classification", "policy")
    assert jobs_of(api, ns.name) == []


def test_sandbox_limits_timeouts_security_context_and_network_policy(
    api: client.ApiClient,
    ns: Namespace,
    agent: Agent,
) -> None:
    shell_tool(api, ns.name, "hog", memory="32Mi", timeout=60)
    shell_tool(api, ns.name, "slow", timeout=3)
    agent.grant(["hog", "slow"], ["sandbox"])
    # dd into memory (tail buffers everything it reads) exceeds the 32Mi limit.
    slow = agent.invoke("slow", {"command": "sleep 30"})
    # The runtime names the container's end OOMKilled only when its OOM event arrives before
    # the exit; on a loaded node containerd sometimes reports the kill as a plain exit 137
    # (seen once in CI). That is the runtime's race, not the operator's reading: the call is
    # made again, at most three times, until the runtime names the OOM kill.
    for _ in range(3):
        oom = agent.invoke("hog", {"command": "tail -c 200000000 /dev/zero"})
        oom_status = status_of(agent.wait(oom, timeout=180))
        exit_code = (oom_status.get("result") or {}).get("exitCode")
        if not (oom_status["state"] == "Observed" and exit_code == 137):
            break
    slow_status = status_of(agent.wait(slow, timeout=180))
    assert oom_status["state"] == "Failed" and oom_status["failureClass"] == "oom-killed", pretty(
        oom_status
    )
    assert slow_status["state"] == "Failed" and slow_status["failureClass"] == "timeout", pretty(
        slow_status
    )

    uid = get(api, ns.name, "toolinvocations", oom)["metadata"]["uid"]
    job = client.BatchV1Api(api).read_namespaced_job(f"ta-{uid}", ns.name)
    assert job.spec.backoff_limit == 0
    assert job.spec.pod_replacement_policy == "Failed"
    assert job.spec.pod_failure_policy.rules[0].action == "FailJob"
    pod = job.spec.template.spec
    assert pod.automount_service_account_token is False
    assert pod.enable_service_links is False
    container = pod.containers[0]
    assert container.resources.limits == {"cpu": "500m", "memory": "32Mi"}
    sc = container.security_context
    assert sc.run_as_non_root and sc.read_only_root_filesystem
    assert sc.allow_privilege_escalation is False and sc.capabilities.drop == ["ALL"]
    assert sc.seccomp_profile.type == "RuntimeDefault"
    # The argv whole, exec'd by the network gate in the tool's own container once the
    # pod's NetworkPolicy is enforced (the tool has the sandbox image, the gate's).
    assert not pod.init_containers
    command = list(container.command or [])
    assert command[:2] == ["/bin/sh", "-c"] and command[3] == "gate"
    assert command[7:] == ["tail", "-c", "200000000", "/dev/zero"]
    policy = client.NetworkingV1Api(api).read_namespaced_network_policy(f"ta-{uid}", ns.name)
    assert sorted(policy.spec.policy_types or []) == ["Egress", "Ingress"]
    assert not policy.spec.egress and not policy.spec.ingress


def test_sandbox_egress_follows_the_allow_list(
    api: client.ApiClient,
    ns: Namespace,
    agent: Agent,
    node_server: tuple[str, int],
) -> None:
    host, port = node_server
    shell_tool(api, ns.name, "fetch-allowed", egress=[f"{host}/32"], timeout=30)
    shell_tool(api, ns.name, "fetch-denied", egress=["127.0.0.1/32"], timeout=30)
    agent.grant(["fetch-allowed", "fetch-denied"], ["sandbox"])
    # busybox wget's own -T crashes in the static build; `timeout` bounds the attempt.
    command = {"command": f"timeout 5 wget -q -O - http://{host}:{port}/egress"}
    allowed = status_of(agent.wait(agent.invoke("fetch-allowed", command), timeout=120))
    denied = status_of(agent.wait(agent.invoke("fetch-denied", command), timeout=120))
    assert allowed["state"] == "Observed", pretty(allowed)
    assert "hello from the node" in allowed["result"]["content"]
    # wget ran and failed to connect: the tool's own error, Observed with isError.
    assert denied["state"] == "Observed" and denied["failureClass"] == "tool-error", pretty(denied)
    assert denied["result"]["isError"] is True and denied["result"]["exitCode"] != 0


def test_a_secret_in_a_result_is_redacted_in_status_artifacts_and_logs(
    api: client.ApiClient,
    ns: Namespace,
    agent: Agent,
    operator: OperatorProcess,
) -> None:
    shell_tool(api, ns.name, "leaky")
    agent.grant(["leaky"], ["sandbox"])
    secret = "ghp_" + "Zx9" * 12
    status = status_of(agent.wait(agent.invoke("leaky", {"command": f"echo token={secret}"})))
    assert status["state"] == "Observed", pretty(status)
    assert secret not in json.dumps(status)
    assert "REDACTED" in status["result"]["content"]
    digest = status["resultRef"].split(":")[1]
    stored = (operator.artifacts / "results" / "sha256" / digest[:2] / digest).read_text()
    assert secret not in stored and "REDACTED" in stored
    assert secret not in operator.log_text()


def test_the_metrics_endpoint_counts_invocations_denials_and_sandboxes(
    api: client.ApiClient,
    ns: Namespace,
    agent: Agent,
    operator: OperatorProcess,
) -> None:
    descriptor(api, ns.name, "list-tools", kind="native", native={"name": "list-tools"})
    agent.grant(["list-tools"], ["read"])
    assert status_of(agent.wait(agent.invoke("list-tools", {})))["state"] == "Observed"
    assert (
        status_of(agent.wait(agent.invoke("list-tools", {}, version="0.0.1")))["state"] == "Denied"
    )
    url = f"http://127.0.0.1:{operator.metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    for metric in (
        "tooladapter_invocations_total",
        "tooladapter_latency_seconds_bucket",
        "tooladapter_denials_total",
        "tooladapter_uncertain",
        "tooladapter_approvals_waiting",
        "tooladapter_sandboxes_open",
    ):
        assert metric in text, metric
    assert f'tenant="{ns.name}"' in text
