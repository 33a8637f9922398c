"""A brokered credential: its declaration and its value, for the one call that carries it.

The value lives in memory, in the lease's Secret (files) or in the egress grant (sandboxed
HTTP injection) and nowhere else; `record` is what status and receipts say about it (never
the value).
"""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass, field

from tooladapter.model import Credential, CredentialInjection


@dataclass(frozen=True)
class Issued:
    """What an OAuth 2.0 issuer minted a token under: for the record, and to revoke it at
    the call's end (the client's secret stays in memory, as the token does)."""

    token_url: str
    client_id: str
    client_secret: str = field(repr=False)
    scopes: tuple[str, ...]
    audience: str | None
    revocation_url: str | None
    #: An exchange's subject: the caller's ServiceAccount username.
    subject: str | None = None


@dataclass(frozen=True)
class Carried:
    """One credential a call carries."""

    declaration: Credential
    #: The value as text (for headers and redaction).
    value: str
    #: The value as the Secret holds it (base64): a file gets the bytes unchanged.
    data_b64: str
    #: A token's expiry (RFC 3339); None for a Secret's value.
    expires_at: str | None = None
    #: How an issuer minted it (oauth2ClientCredentials, tokenExchange); None otherwise.
    issued: Issued | None = None

    @property
    def name(self) -> str:
        return self.declaration.name

    @property
    def file_key(self) -> str:
        """The lease Secret's key of a file credential."""
        return f"file-{self.name}"


def header_of(inject: CredentialInjection, value: str) -> tuple[str, str]:
    """(header name, header value) of an HTTP injection: `Basic base64(user:value)` with
    `basicUsername`, else `scheme value` (the value alone when the scheme is empty)."""
    if inject.basic_username is not None:
        pair = f"{inject.basic_username}:{value}".encode()
        return inject.effective_header, "Basic " + base64.b64encode(pair).decode()
    scheme = inject.effective_scheme
    return inject.effective_header, f"{scheme} {value}" if scheme else value


#: What no header value may hold (RFC 9110 5.5): control characters but the tab. aiohttp
#: refuses them only while sending (an error the flow cannot tell from a broken send), and
#: the proxy would pass them on.
HEADER_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")


def header_problem(value: str) -> str | None:
    """Why `value` cannot go into a header (None when it can)."""
    if not value:
        return "is empty"
    if any(c in value for c in "\r\n\0"):
        return "is not a one-line header value"
    if HEADER_CONTROL.search(value):
        return "holds a control character, which no header value may hold"
    if any(ord(c) > 0xFF for c in value):
        # The proxy writes heads as latin-1, one byte a character.
        return "holds a character outside latin-1, which a header cannot carry as is"
    return None


def secret_forms(carried: Carried) -> list[str]:
    """Every text a value may be seen as, for redaction: the value, and the header value
    built from it (base64 of `user:value` hides the value from a plain search)."""
    forms = [carried.value]
    inject = carried.declaration.inject
    if inject.hosts is not None and header_problem(carried.value) is None:
        forms.append(header_of(inject, carried.value)[1])
    return forms


def record(carried: Carried) -> dict[str, object]:
    """What status and receipts say about a carried credential: never its value."""
    declaration = carried.declaration
    out: dict[str, object] = {"name": declaration.name, "source": declaration.source.kind}
    if declaration.inject.file is not None:
        out["file"] = declaration.inject.file
    else:
        out["hosts"] = list(declaration.inject.hosts or [])
    if carried.expires_at:
        out["expiresAt"] = carried.expires_at
    issued = carried.issued
    if issued is not None:
        out["tokenUrl"] = issued.token_url
        out["scopes"] = list(issued.scopes)
        if issued.audience is not None:
            out["audience"] = issued.audience
        if issued.subject is not None:
            out["subject"] = issued.subject
    return out
