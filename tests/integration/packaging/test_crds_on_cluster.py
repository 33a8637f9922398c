"""The API server itself enforces the CRD schemas, CEL rules, RBAC roles and admission policies.

Needs a cluster in KUBECONFIG (`make cluster-up`); installs crds/ and manifests/ with kubectl
(idempotent, what `make install` does). Every test works in a fresh namespace, deleted after.
Nothing here needs the operator running.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar, cast

import pytest
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.skipif(not os.environ.get("KUBECONFIG"), reason="needs KUBECONFIG"),
]

ROOT = Path(__file__).resolve().parents[3]
GROUP, VERSION = "tooladapter.dev", "v1alpha1"
PLURALS = ["tooldescriptors", "mcpservers", "toolinvocations", "toolapprovals", "toolpolicies"]
#: RBAC bindings and admission policies become effective a moment after they are created.
SETTLE_SECONDS = 30.0
T = TypeVar("T")


def kubectl_path() -> str:
    for candidate in (os.environ.get("KUBECTL"), str(ROOT / ".cluster/bin/kubectl")):
        if candidate and Path(candidate).is_file():
            return candidate
    found = shutil.which("kubectl")
    if not found:
        pytest.skip("no kubectl")
    return found


def kubectl(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [kubectl_path(), *args], capture_output=True, text=True, timeout=120, check=False
    )
    if check and result.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)} failed:\n{result.stdout}{result.stderr}")
    return result


def eventually(attempt: Callable[[], T], *, timeout: float = SETTLE_SECONDS) -> T:
    """Retry `attempt` until it stops raising AssertionError, or re-raise after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return attempt()
        except AssertionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def admin() -> client.ApiClient:
    configuration = client.Configuration()
    config.load_kube_config(client_configuration=configuration)
    return client.ApiClient(configuration)


@pytest.fixture(scope="module")
def installed(admin: client.ApiClient) -> None:
    """crds/ and manifests/ applied, the CRDs established."""
    kubectl("apply", "--server-side", "--force-conflicts", "-f", str(ROOT / "crds"))
    kubectl(
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        *[f"crd/{plural}.{GROUP}" for plural in PLURALS],
    )
    kubectl("apply", "--server-side", "--force-conflicts", "-k", str(ROOT / "manifests"))


@pytest.fixture(scope="module")
def admin_user(admin: client.ApiClient) -> str:
    review = client.AuthenticationV1Api(admin).create_self_subject_review(
        {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}  # type: ignore[arg-type]  # the client sends a dict body as is
    )
    return cast(str, review.status.user_info.username)


@pytest.fixture
def namespace(admin: client.ApiClient, installed: None) -> Iterator[str]:
    core = client.CoreV1Api(admin)
    name = f"ta-crd-{uuid.uuid4().hex[:8]}"
    core.create_namespace({"metadata": {"name": name, "labels": {"tooladapter.dev/test": "crds"}}})  # type: ignore[arg-type]  # the client sends a dict body as is
    try:
        yield name
    finally:
        core.delete_namespace(name, propagation_policy="Background")


def user_client(admin: client.ApiClient, namespace: str, sa: str, *roles: str) -> client.ApiClient:
    """A client authenticated as a fresh ServiceAccount bound to `roles` in `namespace`."""
    core = client.CoreV1Api(admin)
    rbac = client.RbacAuthorizationV1Api(admin)
    core.create_namespaced_service_account(namespace, {"metadata": {"name": sa}})  # type: ignore[arg-type]  # the client sends a dict body as is
    for role in roles:
        rbac.create_namespaced_role_binding(
            namespace,
            {  # type: ignore[arg-type]  # the client sends a dict body as is
                "metadata": {"name": f"{sa}-{role}"},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": role,
                },
                "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": namespace}],
            },
        )
    token = core.create_namespaced_service_account_token(
        sa,
        namespace,
        client.AuthenticationV1TokenRequest(
            spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=600)
        ),
    ).status.token
    base = admin.configuration
    configuration = client.Configuration()
    configuration.host = base.host
    configuration.ssl_ca_cert = base.ssl_ca_cert
    configuration.verify_ssl = base.verify_ssl
    configuration.tls_server_name = getattr(base, "tls_server_name", None)
    configuration.api_key = {"authorization": cast(str, token)}
    configuration.api_key_prefix = {"authorization": "Bearer"}
    return client.ApiClient(configuration)


def sa_user(namespace: str, sa: str) -> str:
    return f"system:serviceaccount:{namespace}:{sa}"


def custom(api: client.ApiClient) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api)


def create(api: client.ApiClient, namespace: str, plural: str, body: dict[str, Any]) -> Any:
    kind = {
        "tooldescriptors": "ToolDescriptor",
        "mcpservers": "McpServer",
        "toolinvocations": "ToolInvocation",
        "toolapprovals": "ToolApproval",
        "toolpolicies": "ToolPolicy",
    }[plural]
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": kind, **body}
    return custom(api).create_namespaced_custom_object(GROUP, VERSION, namespace, plural, body)


def merge_patch(
    api: client.ApiClient,
    namespace: str,
    plural: str,
    name: str,
    patch: dict[str, Any],
    *,
    status: bool = False,
) -> Any:
    objects = custom(api)
    method = (
        objects.patch_namespaced_custom_object_status
        if status
        else objects.patch_namespaced_custom_object
    )
    return method(
        GROUP,
        VERSION,
        namespace,
        plural,
        name,
        patch,
        _content_type="application/merge-patch+json",
    )


def rejected(call: Callable[[], Any], status: int, *needles: str) -> str:
    """Run `call`, assert the API server refuses it with `status` and every needle."""
    try:
        call()
    except ApiException as exc:
        body = exc.body.decode() if isinstance(exc.body, bytes) else str(exc.body)
        message = json.loads(body).get("message", body) if body.startswith("{") else body
        assert exc.status == status, f"expected {status}, got {exc.status}: {message}"
        for needle in needles:
            assert needle in message, f"{needle!r} not in {message!r}"
        return str(message)
    raise AssertionError(f"the API server accepted it (expected {status}: {needles})")


def invocation(name: str, caller: str, **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {
            "tool": {"id": "echo", "version": "1.0.0"},
            "arguments": {"text": "hello", "n": 1},
            "caller": {"kind": "user", "name": caller},
            **spec,
        },
    }


def descriptor(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {
            "toolId": "echo",
            "version": "1.0.0",
            "kind": "native",
            "native": {"name": "list-tools"},
            "sideEffectClass": "read",
            **spec,
        },
    }


# --------------------------------------------------------------------------- CRDs


def test_crds_apply_and_are_structural(admin: client.ApiClient, installed: None) -> None:
    result = kubectl("apply", "--dry-run=server", "--server-side", "-f", str(ROOT / "crds"))
    assert result.returncode == 0
    ext = client.ApiextensionsV1Api(admin)
    for plural in PLURALS:
        crd = ext.read_custom_resource_definition(f"{plural}.{GROUP}")
        conditions = {c.type: c for c in crd.status.conditions or []}
        assert conditions["Established"].status == "True", plural
        assert conditions["NamesAccepted"].status == "True", plural
        assert "NonStructuralSchema" not in conditions, conditions["NonStructuralSchema"].message


def test_kubectl_get_shows_printer_columns(
    admin: client.ApiClient, namespace: str, admin_user: str
) -> None:
    create(admin, namespace, "tooldescriptors", descriptor("echo-1"))
    out = kubectl("get", "tooldescriptors", "-n", namespace).stdout
    header = out.splitlines()[0].split()
    assert header[:5] == ["NAME", "TOOL", "VERSION", "KIND", "CLASS"]
    assert "echo-1" in out
    create(admin, namespace, "toolinvocations", invocation("call-1", admin_user))
    header = kubectl("get", "ti", "-n", namespace).stdout.splitlines()[0].split()
    assert header[:5] == ["NAME", "TOOL", "VERSION", "STATE", "CLASS"]
    everything = kubectl("get", "tooladapter", "-n", namespace, "-o", "name").stdout
    assert "tooldescriptor.tooladapter.dev/echo-1" in everything
    assert "toolinvocation.tooladapter.dev/call-1" in everything


def test_invalid_enum_is_rejected_with_its_field_path(
    admin: client.ApiClient, namespace: str
) -> None:
    rejected(
        lambda: create(
            admin, namespace, "tooldescriptors", descriptor("bad", sideEffectClass="sometimes")
        ),
        422,
        "spec.sideEffectClass",
        "sometimes",
    )


def test_ranges_and_kind_blocks_are_enforced(admin: client.ApiClient, namespace: str) -> None:
    rejected(
        lambda: create(
            admin, namespace, "tooldescriptors", descriptor("slow", timeoutSeconds=86_401)
        ),
        422,
        "spec.timeoutSeconds",
    )
    body = descriptor("no-http", kind="http")
    rejected(
        lambda: create(admin, namespace, "tooldescriptors", body),
        422,
        "spec.http is required when kind is http",
    )


def test_descriptor_identity_is_immutable(admin: client.ApiClient, namespace: str) -> None:
    create(admin, namespace, "tooldescriptors", descriptor("echo"))
    rejected(
        lambda: merge_patch(
            admin, namespace, "tooldescriptors", "echo", {"spec": {"version": "2"}}
        ),
        422,
        "spec.version is immutable",
    )
    merge_patch(admin, namespace, "tooldescriptors", "echo", {"spec": {"description": "ok"}})


def test_invocation_spec_is_immutable_except_interrupt(
    admin: client.ApiClient, namespace: str, admin_user: str
) -> None:
    create(admin, namespace, "toolinvocations", invocation("call", admin_user))
    rejected(
        lambda: merge_patch(
            admin, namespace, "toolinvocations", "call", {"spec": {"arguments": {"n": 2}}}
        ),
        422,
        "spec.arguments is immutable",
    )
    rejected(
        lambda: merge_patch(admin, namespace, "toolinvocations", "call", {"spec": {"runId": "r"}}),
        422,
        "spec.runId is immutable",
    )
    # A renamed argument (same count, a key gone, a key new): the CRD rule's `==` compares an
    # object that only preserves unknown fields by size and shared keys and let it through;
    # the arguments policy compares them whole.
    rejected(
        lambda: merge_patch(
            admin,
            namespace,
            "toolinvocations",
            "call",
            {"spec": {"arguments": {"n": None, "url": "http://elsewhere.example/"}}},
        ),
        422,
        "spec.arguments is immutable",
    )
    rejected(
        lambda: custom(admin).patch_namespaced_custom_object(
            GROUP,
            VERSION,
            namespace,
            "toolinvocations",
            "call",
            [{"op": "move", "from": "/spec/arguments/n", "path": "/spec/arguments/m"}],
            _content_type="application/json-patch+json",
        ),
        422,
        "spec.arguments is immutable",
    )
    # A null in the spec is pruned: flipping an optional field between null and absent
    # writes nothing (before, anyone who may patch could bump another's call at will).
    stored = cast(
        dict[str, Any],
        custom(admin).get_namespaced_custom_object(
            GROUP, VERSION, namespace, "toolinvocations", "call"
        ),
    )
    before = stored["metadata"]["resourceVersion"]
    after = cast(
        dict[str, Any],
        custom(admin).patch_namespaced_custom_object(
            GROUP,
            VERSION,
            namespace,
            "toolinvocations",
            "call",
            [{"op": "add", "path": "/spec/runId", "value": None}],
            _content_type="application/json-patch+json",
        ),
    )
    assert after["metadata"]["resourceVersion"] == before
    assert "runId" not in after["spec"]
    patched = merge_patch(
        admin, namespace, "toolinvocations", "call", {"spec": {"interrupt": True}}
    )
    assert patched["spec"]["interrupt"] is True
    rejected(
        lambda: merge_patch(
            admin, namespace, "toolinvocations", "call", {"spec": {"interrupt": False}}
        ),
        422,
        "spec.interrupt cannot be reset",
    )


def test_approval_is_immutable(admin: client.ApiClient, namespace: str, admin_user: str) -> None:
    approval = {
        "metadata": {"name": "ok"},
        "spec": {
            "invocation": "call",
            "requestHash": "sha256:" + "a" * 64,
            "descriptorDigest": "sha256:" + "d" * 64,
            "toolVersion": "1.0.0",
            "decision": "Approved",
            "reviewer": admin_user,
        },
    }
    create(admin, namespace, "toolapprovals", approval)
    rejected(
        lambda: merge_patch(admin, namespace, "toolapprovals", "ok", {"spec": {"comment": "x"}}),
        422,
        "immutable",
    )
    rejected(
        lambda: merge_patch(
            admin, namespace, "toolapprovals", "ok", {"spec": {"decision": "Rejected"}}
        ),
        422,
        "immutable",
    )
    # the operator still writes its status
    merge_patch(admin, namespace, "toolapprovals", "ok", {"status": {"bound": True}}, status=True)


# --------------------------------------------------------------------------- admission + RBAC


def test_agent_cannot_create_an_invocation_for_another_caller(
    admin: client.ApiClient, namespace: str
) -> None:
    agent = user_client(admin, namespace, "agent-1", "tooladapter-requester")
    me = sa_user(namespace, "agent-1")
    other = sa_user(namespace, "agent-2")

    def own_call_is_accepted() -> None:
        try:
            create(agent, namespace, "toolinvocations", invocation("mine", me))
        except ApiException as exc:
            raise AssertionError(f"RBAC not effective yet: {exc.status}") from exc

    eventually(own_call_is_accepted)

    attempt = 0

    def foreign_call_is_refused() -> None:
        nonlocal attempt
        attempt += 1
        name = f"theirs-{attempt}"
        rejected(
            lambda: create(agent, namespace, "toolinvocations", invocation(name, other)),
            403,
            "spec.caller.name must be the creating user",
            me,
        )

    eventually(foreign_call_is_refused)


def test_agent_cannot_confirm_effects_or_approve(admin: client.ApiClient, namespace: str) -> None:
    agent = user_client(admin, namespace, "agent-1", "tooladapter-requester")
    me = sa_user(namespace, "agent-1")
    eventually(lambda: _created(agent, namespace, invocation("mine", me)))
    rejected(
        lambda: merge_patch(
            agent,
            namespace,
            "toolinvocations",
            "mine",
            {"status": {"effectConfirmation": {"effectHappened": True}}},
            status=True,
        ),
        403,
    )
    rejected(lambda: create(agent, namespace, "toolapprovals", _approval("a", me)), 403)


def test_agent_may_interrupt_only_its_own_calls(
    admin: client.ApiClient, namespace: str, admin_user: str
) -> None:
    agent = user_client(admin, namespace, "agent-1", "tooladapter-requester")
    me = sa_user(namespace, "agent-1")
    create(admin, namespace, "toolinvocations", invocation("admins", admin_user))
    eventually(lambda: _created(agent, namespace, invocation("mine", me)))
    patch = {"spec": {"interrupt": True}}
    merge_patch(agent, namespace, "toolinvocations", "mine", patch)
    eventually(
        lambda: rejected(
            lambda: merge_patch(agent, namespace, "toolinvocations", "admins", patch),
            403,
            "may set spec.interrupt",
        )
    )


def test_reviewer_must_be_the_creator(admin: client.ApiClient, namespace: str) -> None:
    reviewer = user_client(admin, namespace, "rev", "tooladapter-reviewer")
    me = sa_user(namespace, "rev")
    eventually(lambda: _created(reviewer, namespace, _approval("own", me), "toolapprovals"))
    eventually(
        lambda: rejected(
            lambda: create(reviewer, namespace, "toolapprovals", _approval("x", "alice")),
            403,
            "spec.reviewer must be the creating user",
        )
    )
    foreign_group = _approval("grp", me, reviewerGroups=["platform-reviewers"])
    rejected(
        lambda: create(reviewer, namespace, "toolapprovals", foreign_group),
        403,
        "platform-reviewers",
    )
    own_group = _approval("grp2", me, reviewerGroups=[f"system:serviceaccounts:{namespace}"])
    create(reviewer, namespace, "toolapprovals", own_group)


def test_only_platform_admins_activate_mcp_servers(admin: client.ApiClient, namespace: str) -> None:
    workspace = user_client(admin, namespace, "ws", "tooladapter-workspace-admin")
    platform = user_client(admin, namespace, "plat", "tooladapter-platform-admin")

    def server(name: str, activated: bool) -> dict[str, Any]:
        return {
            "metadata": {"name": name},
            "spec": {"url": "https://mcp.example.test/mcp", "activated": activated},
        }

    eventually(lambda: _created(workspace, namespace, server("s1", False), "mcpservers"))
    eventually(
        lambda: rejected(
            lambda: create(workspace, namespace, "mcpservers", server("s2", True)),
            403,
            "mcpservers/activation",
        )
    )
    rejected(
        lambda: merge_patch(
            workspace, namespace, "mcpservers", "s1", {"spec": {"activated": True}}
        ),
        403,
        "mcpservers/activation",
    )
    eventually(
        lambda: _patched(platform, namespace, "mcpservers", "s1", {"spec": {"activated": True}})
    )
    bad_url = server("s3", False)
    bad_url["spec"]["url"] = "https://"
    rejected(lambda: create(admin, namespace, "mcpservers", bad_url), 422, "spec.url")


def test_operators_confirm_uncertain_effects_in_their_own_name(
    admin: client.ApiClient, namespace: str, admin_user: str
) -> None:
    ops = user_client(admin, namespace, "ops", "tooladapter-operations")
    me = sa_user(namespace, "ops")
    create(admin, namespace, "toolinvocations", invocation("call", admin_user))
    merge_patch(
        admin, namespace, "toolinvocations", "call", {"status": {"state": "Executing"}}, status=True
    )

    def confirm(by: str) -> dict[str, Any]:
        return {
            "status": {
                "effectConfirmation": {
                    "effectHappened": True,
                    "confirmedBy": by,
                    "evidence": "the ticket exists",
                }
            }
        }

    def patch(body: dict[str, Any]) -> Any:
        return merge_patch(ops, namespace, "toolinvocations", "call", body, status=True)

    eventually(lambda: rejected(lambda: patch(confirm(me)), 403, "only on an Uncertain"))
    rejected(
        lambda: patch({"status": {"state": "Observed"}}), 403, "only status.effectConfirmation"
    )
    merge_patch(
        admin, namespace, "toolinvocations", "call", {"status": {"state": "Uncertain"}}, status=True
    )
    rejected(lambda: patch(confirm("someone-else")), 403, "must be the patching user")
    done = patch(confirm(me))
    assert done["status"]["effectConfirmation"]["confirmedBy"] == me
    merge_patch(
        admin,
        namespace,
        "toolinvocations",
        "call",
        {"status": {"effectConfirmation": {"recorded": True}}},
        status=True,
    )
    changed = confirm(me)
    changed["status"]["effectConfirmation"]["effectHappened"] = False
    rejected(lambda: patch(changed), 403, "already recorded")


# --------------------------------------------------------------------------- helpers


def _approval(name: str, reviewer: str, **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {
            "invocation": "call",
            "requestHash": "sha256:" + "b" * 64,
            "descriptorDigest": "sha256:" + "d" * 64,
            "toolVersion": "1.0.0",
            "decision": "Approved",
            "reviewer": reviewer,
            **spec,
        },
    }


def _created(
    api: client.ApiClient, namespace: str, body: dict[str, Any], plural: str = "toolinvocations"
) -> None:
    """Create, treating 403 as "RBAC/admission not settled yet" (for `eventually`)."""
    try:
        create(api, namespace, plural, body)
    except ApiException as exc:
        if exc.status == 409:
            return
        raise AssertionError(f"not accepted yet: {exc.status} {exc.body!r}") from exc


def _patched(
    api: client.ApiClient, namespace: str, plural: str, name: str, body: dict[str, Any]
) -> None:
    try:
        merge_patch(api, namespace, plural, name, body)
    except ApiException as exc:
        raise AssertionError(f"not accepted yet: {exc.status} {exc.body!r}") from exc
