"""Which credentials a gated call will carry, and where: what a reviewer approves with it.

An approval lets the call run with every credential its descriptor declares
(`spec.credentials`), so every review view (the page, `tooladapter approvals`) shows them:
the name, where the value comes from (a Secret's name and key, or a ServiceAccount's name:
names, never values) and where it goes (the hosts, with the header and the methods and
paths that carry it, or the file a container tool reads).

They are the descriptor's, never the agent's: the agent cannot add, change or aim one,
so the views label them as declared by the descriptor, apart from the arguments (which
are shown whole, `review.shown`). They are read from the descriptor the call was
validated against: the one of its tool id and version whose digest is the call's
`status.descriptorDigest` (the digest its approval binds to). A descriptor that changed
since binds no approval (the call is checked again and denied), so its credentials are
not shown as the call's. An mcp tool carries its McpServer's credentials, declared
there: the views name the server.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum
from typing import Any

from pydantic import ValidationError

from tooladapter.enums import ToolKind
from tooladapter.model import Credential, ToolDescriptorSpec
from tooladapter.pipeline.hashing import descriptor_digest
from tooladapter.pipeline.parts import spec_of as _spec
from tooladapter.pipeline.parts import status_of as _status
from tooladapter.review.shown import visible

#: Who declared what the views show under "credentials": never the agent.
DECLARED_BY = "descriptor"


class Found(StrEnum):
    """What became of the descriptor the call was validated against."""

    #: The descriptor of the call's digest: its credentials are the call's.
    VALIDATED = "validated"
    #: A descriptor of the call's tool and version, with another digest: it changed.
    CHANGED = "changed"
    #: No descriptor of the call's tool and version (or the call was never validated).
    MISSING = "missing"
    #: The namespace's descriptors could not be read (RBAC): nothing is known.
    UNREAD = "unread"


def source_view(credential: Credential) -> dict[str, Any]:
    """Where the value comes from: kinds and names (names are not secrets)."""
    source = credential.source
    if source.secret_key_ref is not None:
        ref = source.secret_key_ref
        return {"kind": "secretKeyRef", "secret": ref.name, "key": ref.key}
    if source.oauth2_client_credentials is not None or source.token_exchange is not None:
        issued = source.issued
        assert issued is not None
        return {
            "kind": source.kind,
            "tokenUrl": issued.token_url,
            "clientId": issued.client_id,
            "secret": issued.client_secret_ref.name,
            "key": issued.client_secret_ref.key,
            "scopes": list(issued.scopes),
            "audience": issued.audience,
        }
    token = source.service_account_token
    assert token is not None  # exactly one source (the model's validator)
    return {
        "kind": "serviceAccountToken",
        "serviceAccount": token.service_account_name,
        "audiences": list(token.audiences),
    }


def where_view(credential: Credential) -> dict[str, Any]:
    """Where the value goes: a file, or the hosts with the header and the filters."""
    inject = credential.inject
    if inject.file is not None:
        return {"file": inject.file}
    where: dict[str, Any] = {
        "hosts": list(inject.hosts or []),
        "header": inject.effective_header,
        # None: every method / every path.
        "methods": list(inject.methods) if inject.methods is not None else None,
        "paths": list(inject.paths) if inject.paths is not None else None,
    }
    if inject.basic_username is not None:
        where["basicUsername"] = inject.basic_username
    else:
        where["scheme"] = inject.effective_scheme
    return where


def credential_text(name: str, source: dict[str, Any], where: dict[str, Any]) -> str:
    """One line for a person: `name: from Secret s key k, as header H (Bearer) to hosts
    h1, h2 (methods ...; paths ...)` or `... to file /path`."""
    if source["kind"] == "secretKeyRef":
        origin = f"Secret {source['secret']} key {source['key']}"
    elif source["kind"] in ("oauth2ClientCredentials", "tokenExchange"):
        how = "on behalf of the caller" if source["kind"] == "tokenExchange" else "for"
        origin = (
            f"a token minted per call by {source['tokenUrl']} {how} client {source['clientId']}"
        )
        if source["scopes"]:
            origin += f" (scopes {', '.join(source['scopes'])})"
    else:
        origin = f"a token of ServiceAccount {source['serviceAccount']}"
        if source["audiences"]:
            origin += f" (audiences {', '.join(source['audiences'])})"
    if "file" in where:
        return visible(f"{name}: {origin}, as the read-only file {where['file']}")
    if "basicUsername" in where:
        form = f"Basic, user {where['basicUsername']}"
    else:
        form = where["scheme"] or "the value alone"
    methods = ", ".join(where["methods"]) if where["methods"] is not None else "every method"
    paths = ", ".join(where["paths"]) if where["paths"] is not None else "every path"
    return visible(
        f"{name}: {origin}, as header {where['header']} ({form}) on requests to "
        f"{', '.join(where['hosts'])} ({methods}; {paths})"
    )


def credential_view(credential: Credential) -> dict[str, Any]:
    source, where = source_view(credential), where_view(credential)
    return {
        "name": credential.name,
        "source": source,
        "where": where,
        "text": credential_text(credential.name, source, where),
    }


def validated_descriptor(
    invocation: dict[str, Any], descriptors: Sequence[dict[str, Any]]
) -> tuple[Found, ToolDescriptorSpec | None]:
    """The descriptor the call was validated against (its digest), if one of `descriptors`
    is; and how it was found."""
    tool = _spec(invocation).get("tool") or {}
    digest = _status(invocation).get("descriptorDigest")
    found = Found.MISSING
    if not digest:
        return found, None  # never validated: no descriptor is its own
    for body in descriptors:
        raw = body.get("spec") or {}
        if raw.get("toolId") != tool.get("id") or raw.get("version") != tool.get("version"):
            continue
        found = Found.CHANGED
        try:
            spec = ToolDescriptorSpec.model_validate(raw)
        except ValidationError:
            continue  # not a descriptor the operator validated anything against
        if descriptor_digest(spec.wire()) == digest:
            return Found.VALIDATED, spec
    return found, None


_NOTES = {
    Found.CHANGED: "the descriptor changed since the call was validated: an approval "
    "will not bind to it (the call is checked again and denied)",
    Found.MISSING: "the descriptor the call was validated against is gone: what it "
    "would carry is unknown",
    Found.UNREAD: "the namespace's tool descriptors could not be read: what the call "
    "would carry is unknown",
}


def carried_view(
    invocation: dict[str, Any], descriptors: Sequence[dict[str, Any]] | None
) -> dict[str, Any]:
    """The credentials `invocation` will carry, from `descriptors` (the bodies of its
    namespace's ToolDescriptors; None: they could not be read)."""
    found, spec = (Found.UNREAD, None)
    if descriptors is not None:
        found, spec = validated_descriptor(invocation, descriptors)
    view: dict[str, Any] = {
        "declaredBy": DECLARED_BY,
        "descriptor": found.value,
        "known": spec is not None,
        "note": _NOTES.get(found),
        "credentials": [],
        "mcpServer": None,
    }
    if spec is None:
        return view
    view["credentials"] = [credential_view(c) for c in spec.credentials]
    if spec.kind == ToolKind.MCP and spec.mcp is not None:
        view["mcpServer"] = spec.mcp.server
        view["note"] = visible(
            f"an mcp tool carries the credentials of its McpServer {spec.mcp.server}, "
            "declared there"
        )
    return view
