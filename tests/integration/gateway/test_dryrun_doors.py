"""Issue 16: the three doors to a dry run agree, and a real call decides what they say.

The gateway's REST dry run (nothing created), the CLI's `dry-run` (a `spec.dryRun`
invocation, as an agent with only its token) and a `spec.dryRun` object created the
kubectl way give the same preview for each case of `test_dryrun.CASES`; the real call
ends where the preview says it would stop."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, cast

import pytest
from kubernetes import client

from tests.integration.cli.test_cli import Cli, explain
from tests.integration.flow.test_dryrun import CASES, WAIT, native, preview_agrees, tool_policy
from tests.integration.gateway_client import http_json, token_of
from tests.integration.objects import Agent, pretty, status_of
from tooladapter import GROUP, VERSION
from tooladapter.devtools import Namespace, OperatorProcess

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(420)]

#: What every door must answer alike (the whole preview, but for the permission
#: questions' wording, which is identical too and so is compared as well).
SAME = (
    "verdict",
    "deniedStage",
    "failureClass",
    "message",
    "validation",
    "policy",
    "classification",
    "permission",
    "approval",
    "notEvaluated",
)


def _invocations(api: client.ApiClient, namespace: str) -> list[str]:
    items = cast(
        dict[str, Any],
        client.CustomObjectsApi(api).list_namespaced_custom_object(
            GROUP, VERSION, namespace, "toolinvocations"
        ),
    )["items"]
    return [item["metadata"]["name"] for item in items]


def _claims(api: client.ApiClient, namespace: str) -> list[str | None]:
    leases = client.CoordinationV1Api(api).list_namespaced_lease(namespace).items
    return [
        lease.metadata.name
        for lease in leases
        if lease.metadata.name.startswith(("ta-idem-", "ta-fence-"))
    ]


def _tools(api: client.ApiClient, namespace: str, agent: Agent) -> None:
    """The tools, policies and grants of `test_dryrun`'s table."""
    native(api, namespace, "lister")
    native(api, namespace, "banned")
    native(api, namespace, "ungranted")
    native(api, namespace, "writer", "shared-write")
    tool_policy(
        api, namespace, "no-banned", {"tools": {"deny": [{"id": "banned", "reason": "no"}]}}
    )
    tool_policy(
        api,
        namespace,
        "etc-needs-review",
        {
            "conditions": [
                {"path": "/path", "operator": "matches", "value": "^/etc/",
                 "effect": "requireApproval"}
            ]
        },
    )  # fmt: skip
    agent.grant(["lister", "banned", "writer"], ["read", "shared-write"])


def test_rest_cli_and_kubectl_dry_runs_agree_and_the_real_call_decides_the_same(
    api: client.ApiClient,
    ns: Namespace,
    agent: Agent,
    operator: OperatorProcess,
    tmp_path: Path,
) -> None:
    _tools(api, ns.name, agent)
    token = token_of(agent)
    base = f"{operator.gateway_url}/namespaces/{ns.name}/tools"

    # 1. REST: answered at once, nothing created, nothing claimed.
    rest: dict[str, dict[str, Any]] = {}
    for case, tool, arguments, *_ in CASES:
        status, kind, body = http_json(
            "POST",
            f"{base}/{tool}/dry-run",
            token,
            {"arguments": arguments, "idempotencyKey": f"key-{case}", "runId": "doors"},
        )
        assert status == 200 and kind.startswith("application/json"), (case, body)
        rest[case] = body
    assert _invocations(api, ns.name) == []
    assert _claims(api, ns.name) == []

    # 2. The CLI, as the agent (its kubeconfig holds only the agent's token).
    cli = Cli(tmp_path, api, agent)
    shown_by_cli: dict[str, dict[str, Any]] = {}
    for case, tool, arguments, _state, verdict, _stage in CASES:
        done = cli("dry-run", tool, "--args-json", json.dumps(arguments), "--name",
                   f"cli-{case}", "-o", "json")  # fmt: skip
        assert done.returncode == (3 if verdict == "would-be-denied" else 0), explain(done)
        outcome = json.loads(done.stdout)
        assert outcome["state"] == "Previewed", outcome
        shown_by_cli[case] = outcome["preview"]

    # 3. kubectl's way: a spec.dryRun object; then 4. the real call.
    for case, tool, arguments, *_ in CASES:
        agent.invoke(tool, arguments, name=f"kubectl-{case}", dryRun=True)
        agent.invoke(tool, arguments, name=f"real-{case}")

    for case, _tool, _arguments, state, verdict, stage in CASES:
        kubectl = status_of(agent.wait(f"kubectl-{case}"))["preview"]
        real = status_of(agent.wait(f"real-{case}", states={WAIT, state, "Denied", "Failed"}))
        doors = {"rest": rest[case], "cli": shown_by_cli[case], "kubectl": kubectl}
        for key in SAME:
            values = {door: shown.get(key) for door, shown in doors.items()}
            assert len({json.dumps(v, sort_keys=True) for v in values.values()}) == 1, (
                case,
                key,
                pretty(values),
            )
        shown = rest[case]
        assert real["state"] == state, pretty(real)
        preview_agrees(shown, real, verdict=verdict, stage=stage)
    # Only the dry runs (never executed) and the real calls exist; no key was claimed by
    # a preview (the real calls carry none).
    assert _claims(api, ns.name) == []


def test_a_rest_dry_run_refuses_what_a_call_could_not_be(
    api: client.ApiClient, ns: Namespace, agent: Agent, operator: OperatorProcess
) -> None:
    native(api, ns.name, "lister")
    agent.grant(["lister"], ["read"])
    token = token_of(agent)
    url = f"{operator.gateway_url}/namespaces/{ns.name}/tools/lister/dry-run"

    status, _, body = http_json("POST", url, token, {"arguments": {"path": "/a"}, "extra": 1})
    assert status == 422 and "extra" in body["detail"], body
    status, _, body = http_json("POST", url, token, {"arguments": [1]})
    assert status == 422, body
    status, _, body = http_json("POST", url, token, {"version": "not a version"})
    assert status == 422, body
    # No callable version of an unknown tool to default to.
    status, _, body = http_json(
        "POST", url.replace("/lister/", "/nothing/"), token, {"arguments": {}}
    )
    assert status == 404, body
    # A version that is not published: previewed, denied at validation, naming what is.
    status, _, body = http_json(
        "POST", url, token, {"arguments": {"path": "/a"}, "version": "9.0.0"}
    )
    assert status == 200 and body["deniedStage"] == "validation", body
    assert body["validation"]["publishedVersions"] == ["1.0.0"], body
    # A ServiceAccount that may not create invocations here has nothing to preview.
    stranger = Agent.create(api, ns.name, "reviewer-x", role="tooladapter-reviewer")
    status, _, body = http_json("POST", url, token_of(stranger), {"arguments": {"path": "/a"}})
    assert status == 403, body
    assert _invocations(api, ns.name) == []
