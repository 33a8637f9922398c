"""OAuth 2.0 token endpoints, pure: what the operator sends an issuer (RFC 6749 4.4 client
credentials, RFC 8693 token exchange, RFC 7009 revocation) and how it reads the answers.

The HTTP exchange itself is `executors.issuers`; this module only builds forms and parses
bodies, so the flow and its tests see one contract (`TokenIssuer`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Protocol

from tooladapter.model import OAuth2ClientCredentialsSource, TokenExchangeSource

CLIENT_CREDENTIALS = "client_credentials"
TOKEN_EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange"  # noqa: S105  # a grant type, not a secret
#: A Kubernetes ServiceAccount token is a JWT (RFC 8693 3).
JWT_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:jwt"  # noqa: S105
ACCESS_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:access_token"  # noqa: S105
#: RFC 6749 5.2: an `error` code is ASCII without quotes or backslashes; anything else an
#: issuer sends is not echoed into status.
_ERROR_CHARS = frozenset(chr(c) for c in range(0x20, 0x7F)) - {'"', "\\"}


@dataclass(frozen=True)
class Minted:
    """A token an issuer answered with (never logged, never in status)."""

    access_token: str
    #: Seconds it lives, as the issuer said (recorded, not promised).
    expires_in: int | None
    #: The scopes granted, when the issuer said (RFC 6749 5.1: else as asked).
    scopes: tuple[str, ...] | None


class IssuerRefused(Exception):  # a refusal, not a bug
    """The issuer answered with an OAuth error (`invalid_client`, `invalid_scope`, ...)."""

    def __init__(self, error: str) -> None:
        super().__init__(error)
        self.error = error


class IssuerUnreachable(Exception):
    """No usable answer: not connected, timed out, refused by address or TLS, or a body
    that is no token response. Nothing was minted that the call could carry."""


class TokenIssuer(Protocol):
    """Mints and revokes tokens at issuers' endpoints."""

    async def token(
        self, url: str, client_id: str, client_secret: str, form: dict[str, str]
    ) -> Minted: ...

    async def revoke(
        self, url: str, client_id: str, client_secret: str, token: str, timeout: float
    ) -> bool: ...


def client_credentials_form(source: OAuth2ClientCredentialsSource) -> dict[str, str]:
    """The form of a client credentials grant (the client authenticates by HTTP Basic)."""
    form = {"grant_type": CLIENT_CREDENTIALS}
    if source.scopes:
        form["scope"] = " ".join(source.scopes)
    if source.audience:
        form["audience"] = source.audience
    return form


def token_exchange_form(source: TokenExchangeSource, subject_token: str) -> dict[str, str]:
    """The form of a token exchange of the caller's ServiceAccount token."""
    form = {
        "grant_type": TOKEN_EXCHANGE,
        "subject_token": subject_token,
        "subject_token_type": JWT_TOKEN_TYPE,
        "requested_token_type": ACCESS_TOKEN_TYPE,
    }
    if source.scopes:
        form["scope"] = " ".join(source.scopes)
    if source.audience:
        form["audience"] = source.audience
    return form


def revocation_form(token: str) -> dict[str, str]:
    return {"token": token, "token_type_hint": "access_token"}


def service_account_of(username: str) -> tuple[str, str] | None:
    """(namespace, name) of a ServiceAccount's username, None for anyone else."""
    parts = username.split(":")
    if len(parts) != 4 or parts[:2] != ["system", "serviceaccount"] or not all(parts[2:]):
        return None
    return parts[2], parts[3]


def _error_code(body: bytes) -> str | None:
    try:
        data = json.loads(body)
    except ValueError:
        return None
    error = data.get("error") if isinstance(data, dict) else None
    if not isinstance(error, str) or not error or len(error) > 64:
        return None
    return error if set(error) <= _ERROR_CHARS else None


def parse_token_response(status: int, body: bytes) -> Minted:
    """The token of a 200 answer; `IssuerRefused` with the issuer's error code for an OAuth
    error (RFC 6749 5.2: 400, or 401 for client authentication); `IssuerUnreachable` for
    anything else (a server error, a proxy's page, a body without a token)."""
    if status != 200:
        error = _error_code(body) if status in (400, 401, 403) else None
        if error is not None:
            raise IssuerRefused(error)
        raise IssuerUnreachable(f"the issuer answered HTTP {status}")
    try:
        data = json.loads(body)
    except ValueError:
        raise IssuerUnreachable("the issuer's answer is not JSON") from None
    token = data.get("access_token") if isinstance(data, dict) else None
    if not isinstance(token, str) or not token or any(c in token for c in "\r\n\0 "):
        raise IssuerUnreachable("the issuer's answer holds no usable access_token")
    expires = data.get("expires_in")
    scope = data.get("scope")
    return Minted(
        access_token=token,
        expires_in=expires if isinstance(expires, int) and expires > 0 else None,
        scopes=tuple(scope.split()) if isinstance(scope, str) else None,
    )
