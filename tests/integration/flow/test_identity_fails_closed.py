"""Identity fails closed on the real API server: with the caller binding deleted, an agent
claiming `system:masters` runs nothing; a call created during the gap stays refused after
the binding is restored; new calls run again. Mutates a cluster-wide object: the binding is
restored as shipped whatever happens."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from tests.integration.objects import Agent, create, descriptor, get, pretty, status_of
from tooladapter.devtools import Namespace, OperatorProcess, wait_for

# It deletes an admission binding every call in the cluster depends on: alone, after the rest.
pytestmark = [pytest.mark.cluster, pytest.mark.cluster_wide, pytest.mark.timeout(300)]

ROOT = Path(__file__).resolve().parents[3]
BINDING = "tooladapter-invocation-caller"


def shipped_binding() -> dict[str, Any]:
    docs = yaml.safe_load_all(
        (ROOT / "manifests" / "admission" / "invocation-caller.yaml").read_text()
    )
    (found,) = [
        d
        for d in docs
        if d
        and d["kind"] == "ValidatingAdmissionPolicyBinding"
        and d["metadata"]["name"] == BINDING
    ]
    return dict(found)


def restore(api: client.ApiClient) -> None:
    """The binding as shipped, unless it is there."""
    admission = client.AdmissionregistrationV1Api(api)
    try:
        admission.read_validating_admission_policy_binding(BINDING)
    except client.ApiException as exc:
        if exc.status != 404:
            raise
        admission.create_validating_admission_policy_binding(
            shipped_binding()  # type: ignore[arg-type]  # the client sends a dict body as is
        )


def forge(agent: Agent, name: str) -> None:
    """The agent creates a call claiming to be a cluster admin."""
    create(
        agent.api,
        agent.namespace,
        "toolinvocations",
        {
            "kind": "ToolInvocation",
            "metadata": {"name": name},
            "spec": {
                "tool": {"id": "list-tools", "version": "1.0.0"},
                "arguments": {},
                "caller": {"kind": "user", "name": "system:admin", "groups": ["system:masters"]},
            },
        },
    )


def forged_once_unbound(agent: Agent, name: str) -> None:
    """Forge as soon as the API server stops enforcing the deleted binding (its admission
    plugin learns of the deletion a moment later: until then the create is refused)."""

    def created() -> bool | None:
        try:
            forge(agent, name)
        except client.ApiException as exc:
            if exc.status == 403 and BINDING in str(exc.body):
                return None
            raise
        return True

    wait_for(created, timeout=60, what=f"{name} stored without the caller binding")


def assert_refused(status: dict[str, Any]) -> None:
    assert status["state"] == "Denied", pretty(status)
    assert status["deniedStage"] == "validation", pretty(status)
    assert status["failureClass"] == "admission-missing", pretty(status)
    assert BINDING in str(status["message"]), pretty(status)


def test_a_missing_caller_binding_runs_nothing_and_calls_of_the_gap_stay_refused(
    api: client.ApiClient, ns: Namespace, agent: Agent, operator: OperatorProcess
) -> None:
    descriptor(api, ns.name, "list-tools", kind="native", native={"name": "list-tools"})
    agent.grant(["list-tools"], ["read"])
    admission = client.AdmissionregistrationV1Api(api)
    try:
        admission.delete_validating_admission_policy_binding(BINDING)
        operator.wait_log("admission not as shipped", timeout=90)
        # The API server stores the forgery (nothing binds the policy); the operator refuses it.
        forged_once_unbound(agent, "forged-admin")
        assert_refused(agent.wait("forged-admin")["status"])

        # A call created during the gap and taken up only after the binding is back (no
        # operator runs meanwhile: the restarted one forgot the gap it saw).
        operator.stop()
        forged_once_unbound(agent, "made-in-gap")
        restore(api)
        operator.start()
        assert_refused(agent.wait("made-in-gap")["status"])
    finally:
        restore(api)
        if operator.proc is None or operator.proc.poll() is not None:
            operator.start()

    # New calls run again: bounded, since a call in the restore's own second (and the clock
    # slack) is refused too.
    def runs() -> dict[str, Any] | None:
        status = agent.wait(agent.invoke("list-tools", {}))["status"]
        if status.get("failureClass") == "admission-missing":
            return None
        return dict(status)

    status = wait_for(runs, timeout=90, what="a new call after the binding was restored")
    assert status["state"] == "Observed", pretty(status)
    assert status_of(get(api, ns.name, "toolinvocations", "made-in-gap"))["state"] == "Denied"
