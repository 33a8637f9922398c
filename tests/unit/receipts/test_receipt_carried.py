"""What a receipt says a call carried: its credentials (never a value), the descriptor
digest it was validated against, and an http tool's target."""

from __future__ import annotations

import base64
import copy
import json
from pathlib import Path

import pytest

from tests.unit.fake_cluster import (
    NAMESPACE,
    ScriptedExecutor,
    descriptor,
    http_descriptor,
    invocation,
    make_runtime,
    namespace_uid,
)
from tooladapter.artifacts import LocalArtifactStore
from tooladapter.cli.chainverify import exit_code_of, expected_of
from tooladapter.cli.exitcodes import ExitCode
from tooladapter.enums import InvocationState, ToolKind
from tooladapter.executors import Outcome
from tooladapter.handlers.confirmations import validated_http as confirmation_http
from tooladapter.model import (
    CredentialUse,
    HttpSpec,
    ToolDescriptorSpec,
    ToolInvocationSpec,
    ToolInvocationStatus,
)
from tooladapter.pipeline.hashing import descriptor_digest
from tooladapter.receipts.core.record import build_receipt, http_target
from tooladapter.receipts.core.signing import KeySet, PublicKey
from tooladapter.receipts.core.signing import receipt_of as receipt_of_bytes
from tooladapter.receipts.service.reader import chain_began, verify_chain

DIGEST = "sha256:" + "d" * 64
SECRET_VALUE = "s3cr3t-value-never-recorded"


def spec(arguments: dict[str, object]) -> ToolInvocationSpec:
    return ToolInvocationSpec.model_validate(
        {
            "tool": {"id": "fetch", "version": "1.0.0"},
            "arguments": arguments,
            "caller": {"kind": "agent", "name": "agent-1"},
        }
    )


def receipt_of(
    status: ToolInvocationStatus,
    *,
    kind: ToolKind = ToolKind.HTTP,
    http: HttpSpec | None = None,
    arguments: dict[str, object] | None = None,
) -> dict[str, object]:
    return build_receipt(
        namespace="team-a",
        name="inv-1",
        uid="uid-1",
        spec=spec(arguments if arguments is not None else {"id": "42"}),
        status=status,
        tool_kind=kind,
        written_at="2026-01-01T12:00:06Z",
        http=http,
    )


def carried_status() -> ToolInvocationStatus:
    return ToolInvocationStatus(
        state=InvocationState.OBSERVED,
        descriptor_digest=DIGEST,
        credentials=[
            CredentialUse(name="api", source="secretKeyRef", hosts=["api.example.com"]),
            CredentialUse(
                name="kube",
                source="serviceAccountToken",
                file="/tooladapter/credentials/token",
                expires_at="2026-01-01T13:00:00Z",
            ),
            CredentialUse(
                name="minted",
                source="tokenExchange",
                hosts=["api.example.com"],
                expires_at="2026-01-01T12:05:00Z",
                token_url="https://issuer.example.com/oauth/token",
                scopes=["items.read"],
                audience="api",
                subject="system:serviceaccount:team:agent",
                revoked=True,
            ),
        ],
    )


@pytest.mark.parametrize("kind", list(ToolKind))
def test_every_kind_records_its_descriptor_digest_and_credentials(kind: ToolKind) -> None:
    receipt = receipt_of(carried_status(), kind=kind)
    assert receipt["descriptorDigest"] == DIGEST
    assert receipt["credentials"] == [
        {
            "name": "api",
            "source": "secretKeyRef",
            "hosts": ["api.example.com"],
            "file": None,
            "expiresAt": None,
            "tokenUrl": None,
            "scopes": None,
            "audience": None,
            "subject": None,
            "revoked": None,
        },
        {
            "name": "kube",
            "source": "serviceAccountToken",
            "hosts": None,
            "file": "/tooladapter/credentials/token",
            "expiresAt": "2026-01-01T13:00:00Z",
            "tokenUrl": None,
            "scopes": None,
            "audience": None,
            "subject": None,
            "revoked": None,
        },
        {
            "name": "minted",
            "source": "tokenExchange",
            "hosts": ["api.example.com"],
            "file": None,
            "expiresAt": "2026-01-01T12:05:00Z",
            "tokenUrl": "https://issuer.example.com/oauth/token",
            "scopes": ["items.read"],
            "audience": "api",
            "subject": "system:serviceaccount:team:agent",
            "revoked": True,
        },
    ]


def test_a_call_that_carried_nothing_says_so_and_one_never_validated_has_no_digest() -> None:
    receipt = receipt_of(ToolInvocationStatus(state=InvocationState.DENIED))
    assert receipt["credentials"] == []
    assert receipt["descriptorDigest"] is None
    assert receipt["target"] is None


def test_the_receipt_holds_no_credential_value() -> None:
    # Status holds no value to copy; whatever the arguments said, nothing else names one.
    receipt = receipt_of(carried_status(), arguments={"id": "42"})
    assert SECRET_VALUE not in json.dumps(receipt)
    assert set(receipt["credentials"][0]) == {  # type: ignore[index]
        "name",
        "source",
        "hosts",
        "file",
        "expiresAt",
        "tokenUrl",
        "scopes",
        "audience",
        "subject",
        "revoked",
    }


def test_an_http_target_is_the_declared_template_and_its_literal_host() -> None:
    http = HttpSpec(method="POST", url="https://api.example.com/v1/items/{id}?q={id}")
    receipt = receipt_of(carried_status(), http=http, arguments={"id": "../../admin"})
    assert receipt["target"] == {
        "method": "POST",
        "urlTemplate": "https://api.example.com/v1/items/{id}?q={id}",
        "host": "api.example.com",
    }


def test_an_explicit_port_stays_with_the_host() -> None:
    http = HttpSpec(url="http://svc.team-a.svc:8080/status")
    assert http_target(http, {})["host"] == "svc.team-a.svc:8080"


def test_a_host_from_a_placeholder_is_the_allowed_host_the_arguments_named() -> None:
    http = HttpSpec(
        url="https://{region}.api.example.com/v1/{id}",
        allowed_hosts=["eu.api.example.com", "us.api.example.com"],
    )
    target = http_target(http, {"region": "eu", "id": "7"})
    assert target == {
        "method": "GET",
        "urlTemplate": "https://{region}.api.example.com/v1/{id}",
        "host": "eu.api.example.com",
    }


@pytest.mark.parametrize(
    "arguments",
    [
        {"region": "evil.example.net#", "id": "7"},  # not an allowed host: never rendered
        {"id": "7"},  # no value for the host's placeholder
        "not an object",
    ],
)
def test_a_placeholder_host_that_does_not_render_is_null(arguments: object) -> None:
    http = HttpSpec(
        url="https://{region}.api.example.com/v1/{id}",
        allowed_hosts=["eu.api.example.com"],
    )
    assert http_target(http, arguments)["host"] is None


def test_only_http_tools_get_a_target() -> None:
    for kind in ToolKind:
        if kind is not ToolKind.HTTP:
            assert receipt_of(carried_status(), kind=kind)["target"] is None


async def test_a_call_that_carried_a_credential_has_a_receipt_that_says_so_and_verifies(
    tmp_path: Path,
) -> None:
    """Through the flow: an http tool with a Secret's credential ends with a receipt that
    names the credential, the descriptor digest and the target, holds no value, and that
    `receipts verify` (what it composes) accepts."""
    h = make_runtime(
        store=LocalArtifactStore(tmp_path),
        executors={ToolKind.HTTP: ScriptedExecutor(Outcome.observed(b'{"ok": true}'))},
    )
    h.cluster.secrets[(NAMESPACE, "api-creds")] = {
        "token": base64.b64encode(SECRET_VALUE.encode()).decode()
    }
    h.publish(
        http_descriptor(
            "fetch",
            "https://api.example.com/v1/items",
            credentials=[
                {
                    "name": "api",
                    "source": {"secretKeyRef": {"name": "api-creds", "key": "token"}},
                    "inject": {"hosts": ["api.example.com"], "methods": ["GET"]},
                }
            ],
        )
    )
    h.cluster.grant(tools=["fetch"], classes=["read"])
    item = copy.deepcopy(await h.run(h.submit(invocation("call-1", tool="fetch"))))
    status = item["status"]
    assert status["state"] == "Observed", status.get("message")
    stored = h.store.get(status["receiptRef"])
    assert SECRET_VALUE.encode() not in stored
    receipt = receipt_of_bytes(stored)
    assert receipt is not None
    assert receipt["descriptorDigest"] == status["descriptorDigest"]
    assert receipt["credentials"] == [
        {
            "name": "api",
            "source": "secretKeyRef",
            "hosts": ["api.example.com"],
            "file": None,
            "expiresAt": None,
            "tokenUrl": None,
            "scopes": None,
            "audience": None,
            "subject": None,
            "revoked": None,
        }
    ]
    assert receipt["target"] == {
        "method": "GET",
        "urlTemplate": "https://api.example.com/v1/items",
        "host": "api.example.com",
    }
    signer = h.rt.chains.signer()
    keys = KeySet.of([PublicKey(signer.keyid, signer.private.public_key(), "2020-01-01T00:00:00Z")])
    uid = namespace_uid(NAMESPACE)
    report = verify_chain(
        h.store,
        namespace=NAMESPACE,
        uid=uid,
        keys=keys,
        head=None,
        since=1,
        expected=expected_of([item], chain_began(h.store, NAMESPACE, uid)),
    )
    assert report.ok and report.checked == 1
    assert exit_code_of(report.first_break) is ExitCode.OK


def test_a_confirmations_receipt_takes_the_target_only_from_the_validated_descriptor() -> None:
    body = http_descriptor("fetch", "https://api.example.com/v1/items")
    spec = ToolDescriptorSpec.model_validate(body["spec"])
    validated = ToolInvocationStatus(
        state=InvocationState.UNCERTAIN, descriptor_digest=descriptor_digest(spec.wire())
    )
    assert confirmation_http(spec, validated) == spec.http
    changed = spec.model_copy(update={"http": HttpSpec(url="https://api.example.com/v2/{id}")})
    assert confirmation_http(changed, validated) is None  # not what the call sent
    assert confirmation_http(None, validated) is None
    native = ToolDescriptorSpec.model_validate(descriptor("lister")["spec"])
    same = ToolInvocationStatus(
        state=InvocationState.UNCERTAIN, descriptor_digest=descriptor_digest(native.wire())
    )
    assert confirmation_http(native, same) is None
