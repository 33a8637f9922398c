"""The `tool-invocation-v1` receipt: the audit record of one call.

The shape follows the reference's example receipt and the ToolInvocation fields it lists;
tenant and project are the namespace. Every key is always present (null when unknown) so
consumers can rely on one schema. The receipt is stored by content hash
(`hashing.digest(receipt)`), so it holds no timestamps other than those of the call and
`writtenAt`, and no secret: the command line must be passed through
`sanitize.redaction.redact_argv` first.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

from tooladapter.egress.core.tally import bytes_moved
from tooladapter.enums import SandboxKind, ToolKind
from tooladapter.model import (
    AuditRequirements,
    CredentialUse,
    HttpSpec,
    ToolInvocationSpec,
    ToolInvocationStatus,
)
from tooladapter.pipeline.hashing import CanonicalizationError, digest
from tooladapter.pipeline.validation.arguments import check_bounds
from tooladapter.pipeline.validation.http_templates import (
    PLACEHOLDER,
    HttpTemplateError,
    render_url,
    template_host_has_placeholder,
)

RECEIPT_SCHEMA = "tool-invocation-v1"


def _value(item: Any) -> Any:
    return item.value if hasattr(item, "value") else item


def _arguments_hash(arguments: Any) -> str | None:
    """The arguments' digest; None for arguments outside the validation bounds (too large,
    too deep, no canonical form): the receipt of their denial must not fail on them, or
    every retry of writing it would fail again."""
    if not arguments or check_bounds(arguments):
        return None
    try:
        return digest(arguments)
    except CanonicalizationError:
        return None


def credential_record(use: CredentialUse) -> dict[str, Any]:
    """One credential the call carried, every key present: its name, the kind of its
    source, where it went (`hosts` for HTTP injection, `file` for a container tool's file)
    and a token's expiry; for a token an issuer minted, its token URL, scopes, audience,
    subject (an exchange) and whether it was revoked. Never a value: status holds none to
    copy."""
    return {
        "name": use.name,
        "source": use.source,
        "hosts": list(use.hosts) if use.file is None else None,
        "file": use.file,
        "expiresAt": use.expires_at,
        "tokenUrl": use.token_url,
        "scopes": list(use.scopes) if use.scopes is not None else None,
        "audience": use.audience,
        "subject": use.subject,
        "revoked": use.revoked,
    }


def _netloc_host(url: str) -> str | None:
    """`host` or `host:port` as the URL names it (lower case, no user info); None when it
    names none."""
    try:
        parts = urlsplit(url)
        host, port = parts.hostname, parts.port
    except ValueError:
        return None
    if not host:
        return None
    shown = f"[{host}]" if ":" in host else host
    return f"{shown}:{port}" if port is not None else shown


def http_target(http: HttpSpec, arguments: Any) -> dict[str, Any]:
    """What an http tool's call aimed at: the method and URL template as the descriptor
    declares them (never the rendered URL: its path and query hold the arguments, which
    `audit` may keep out of the receipt) and the host.

    The host is the template's when its host has no placeholder. When it has one, the host
    is the one the call's arguments name in the rendered URL: `render_url` checks it
    against `http.allowedHosts`, so it is always one the descriptor lists, never free text
    of the agent's. It is null when the URL does not render (arguments out of bounds or
    refused: nothing was sent)."""
    if not template_host_has_placeholder(http.url):
        host = _netloc_host(PLACEHOLDER.sub("x", http.url))
    elif isinstance(arguments, dict) and not check_bounds(arguments):
        try:
            host = _netloc_host(render_url(http, arguments))
        except HttpTemplateError:
            host = None
    else:
        host = None
    return {"method": http.method, "urlTemplate": http.url, "host": host}


def usage(status: ToolInvocationStatus) -> dict[str, Any]:
    """The reference's usage meters for one call (CostUsageService's SandboxMinutes): how
    long the sandbox's tool ran, within what limits, and the bytes it moved through the
    egress proxy."""
    execution, lease = status.execution, status.sandbox_lease
    limits: dict[str, Any] | None = None
    if lease is not None:
        limits = {
            key: value
            for key, value in (("cpu", lease.limits.cpu), ("memory", lease.limits.memory))
            if value
        }
        limits.update(lease.limits.extended)
    # Every connection is in exactly one row (`others` rows included): all bytes count.
    up, down = bytes_moved(status.egress)
    return {
        "sandboxSeconds": execution.sandbox_seconds if execution is not None else None,
        "resourceLimits": limits,
        "timeoutSeconds": lease.limits.timeout_seconds if lease is not None else None,
        "egressBytesUp": up,
        "egressBytesDown": down,
    }


def build_receipt(
    *,
    namespace: str,
    name: str,
    uid: str,
    spec: ToolInvocationSpec | None,
    status: ToolInvocationStatus,
    tool_kind: ToolKind | str | None,
    sandbox_kind: SandboxKind | str | None = None,
    sandbox_pool: str | None = None,
    command_line: Sequence[str] | None = None,
    written_at: str,
    audit: AuditRequirements | None = None,
    namespace_uid: str | None = None,
    http: HttpSpec | None = None,
) -> dict[str, Any]:
    """The receipt of an invocation in its current (normally terminal) state.

    `namespace_uid` names the namespace's incarnation (`tenantUid`): the store keys the
    receipt's index entries by it, and readers serve it only to that incarnation.

    `sandbox_kind`/`sandbox_pool` describe the sandbox when there is no lease in status
    (e.g. denied before leasing); a lease in status wins. Kinds that run no sandbox
    (http, mcp, native) get `{"kind": "None"}`. `spec` may be None (or a partially
    constructed model) for an invocation whose spec never parsed: its fields are null.
    `audit` (the descriptor's auditRequirements) decides whether the arguments' hash, the
    output's hashes and the command line are recorded; `audit` in the receipt says which.

    What the call carried, whatever its kind: `descriptorDigest` (the descriptor it was
    validated against, `status.descriptorDigest`; null when it never was), `credentials`
    (`status.credentials`: every credential brokered for it, `credential_record`) and,
    for an http tool (`http`: the descriptor's http block), `target` (`http_target`);
    null for the other kinds.
    """
    audit = audit or AuditRequirements()
    arguments = getattr(spec, "arguments", None)
    tool = getattr(spec, "tool", None)
    caller = getattr(spec, "caller", None)
    lease = status.sandbox_lease
    if lease is not None:
        sandbox: dict[str, Any] = {
            "kind": lease.kind.value,
            "poolId": lease.pool_id,
            "leaseId": lease.lease_id,
            "runtimeClass": lease.runtime_class,
        }
        if lease.start is not None:
            # Which sandbox ran the call (issue 29): a Job of its own (cold) or a pod ready
            # before it (warm), and the attempt's workspace it shared.
            sandbox["start"] = lease.start.value
            sandbox["sandboxName"] = lease.sandbox_name
            sandbox["workspace"] = (
                lease.workspace.model_dump(mode="json", by_alias=True)
                if lease.workspace is not None
                else None
            )
    else:
        sandbox = {
            "kind": _value(sandbox_kind) if sandbox_kind is not None else SandboxKind.NONE.value,
            "poolId": sandbox_pool,
            "leaseId": None,
            "runtimeClass": None,
        }
    result = status.result
    return {
        "schema": RECEIPT_SCHEMA,
        "invocationId": uid,
        "invocationName": name,
        "tenantId": namespace,
        "tenantUid": namespace_uid,
        "projectId": namespace,
        "environmentId": getattr(spec, "environment_id", None),
        "toolId": getattr(tool, "id", None),
        "toolVersion": getattr(tool, "version", None),
        "toolKind": _value(tool_kind) if tool_kind is not None else None,
        "descriptorDigest": status.descriptor_digest,
        "target": http_target(http, arguments) if http is not None else None,
        "credentials": [credential_record(use) for use in status.credentials],
        # The data-flow rule's view (`pipeline.dataflow`): the labels the call brought, the
        # labels its scopes held with the calls behind them, and why it was gated.
        "dataFlow": (
            status.data_flow.model_dump(mode="json", by_alias=True)
            if status.data_flow is not None
            else None
        ),
        "declaredClass": _value(status.declared_class),
        "effectiveClass": _value(status.effective_class),
        "policyDecisionId": status.policy_decision_id,
        "approvalId": status.approval.name if status.approval else None,
        "approvedBy": status.approval.reviewer if status.approval else None,
        "requestHash": status.request_hash,
        "argumentsHash": _arguments_hash(arguments) if audit.arguments_hash else None,
        "idempotencyKey": getattr(spec, "idempotency_key", None),
        "caller": ({"kind": caller.kind, "name": caller.name} if caller is not None else None),
        "runId": getattr(spec, "run_id", None),
        "attemptId": getattr(spec, "attempt_id", None),
        "fencingToken": getattr(spec, "fencing_token", None),
        "state": status.state.value,
        "failureClass": status.failure_class,
        "deniedStage": status.denied_stage,
        "message": status.message,
        "resultHash": status.result_hash if audit.output_hash else None,
        "resultRef": status.result_ref,
        "result": (
            {
                "originalBytes": result.original_bytes,
                "originalSha256": result.original_sha256 if audit.output_hash else None,
                "truncated": result.truncated,
                "exitCode": result.exit_code,
            }
            if result is not None
            else None
        ),
        "sandbox": sandbox,
        "commandLine": (
            list(command_line) if command_line is not None and audit.command_line else None
        ),
        "audit": audit.wire(),
        "redactions": list(result.redactions) if result is not None else [],
        "egress": [use.sparse_wire() for use in status.egress],
        "egressRecordsRef": status.egress_records_ref,
        "usage": usage(status),
        "stages": [stage.wire() for stage in status.stages],
        "startedAt": status.started_at,
        "endedAt": status.ended_at,
        "auditRef": status.audit_ref,
        "duplicateOf": status.duplicate_of,
        "effectConfirmation": (
            status.effect_confirmation.wire() if status.effect_confirmation else None
        ),
        "writtenAt": written_at,
    }
