"""The one credential declaration of every tool kind and of McpServers: `spec.credentials`.

Each entry names where its value comes from (`source`: exactly one of a Secret's key or a
ServiceAccount's TokenRequest token) and where it goes (`inject`: exactly one of HTTP
requests to listed hosts, or a read-only file for a container tool's fixed command). The
agent never holds a value: the operator (http tools, MCP servers) or the egress proxy
(sandboxed tools) adds it to the requests it matches, and a file is mounted only for a
command the descriptor fixes.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import ConfigDict, Field, model_validator
from pydantic.config import JsonDict

from tooladapter.model.base import Model
from tooladapter.model.common import SecretKeyRef

#: Files are mounted under this directory, read-only; `inject.file` names one below it.
CREDENTIAL_MOUNT_ROOT = "/tooladapter/credentials"
#: A path below the mount root: segments of letters, digits, `.`, `_`, `-`, none `.` or `..`.
FILE_PATTERN = (
    r"^/tooladapter/credentials(/[A-Za-z0-9_-][A-Za-z0-9._-]*|/[.][A-Za-z0-9_-][A-Za-z0-9._-]*)+$"
)
#: `host`, `host:port` or `*.suffix[:port]`, lower case, as in egress allow entries.
HOST_PATTERN = r"^([*][.])?[a-z0-9]([-a-z0-9.]*[a-z0-9])?(:[0-9]{1,5})?$"
HOST_MAX = 260
#: A path prefix: absolute, no whitespace, no fragment or query.
PATH_PATTERN = r"^/[^\s?#]*$"
HEADER_PATTERN = r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$"
CREDENTIAL_NAME_PATTERN = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"
MAX_CREDENTIALS = 8
MAX_HOSTS = 8
MAX_FILTERS = 16

HostEntryText = Annotated[str, Field(pattern=HOST_PATTERN, max_length=HOST_MAX)]
PathPrefix = Annotated[str, Field(pattern=PATH_PATTERN, max_length=1024)]
HttpMethod = Literal["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]

DEFAULT_HEADER = "Authorization"
DEFAULT_SCHEME = "Bearer"


def _exactly_one(fields: tuple[str, ...], where: str) -> JsonDict:
    present = ", ".join(f"has(self.{name})" for name in fields)
    return {
        "rule": f"[{present}].filter(x, x).size() == 1",
        "message": f"{where}: set exactly one of {', '.join(fields)}",
        "reason": "FieldValueInvalid",
    }


class ServiceAccountTokenSource(Model):
    """A TokenRequest token of a ServiceAccount in the same namespace, expiring with the
    call (whoever names the ServiceAccount must be allowed to create its tokens)."""

    service_account_name: str = Field(min_length=1, max_length=253)
    """The ServiceAccount."""
    audiences: list[str] = Field(default_factory=list, max_length=8)
    """Audiences of the token (default: the API server's)."""


#: An issuer's token endpoint: https only (the operator posts client secrets there).
_HTTPS_URL: JsonDict = {
    "x-kubernetes-validations": [
        {
            "rule": "isURL(self) && url(self).getScheme() == 'https'",
            "message": "must be an https URL",
            "reason": "FieldValueInvalid",
        }
    ]
}
HttpsUrl = Annotated[
    str, Field(min_length=9, max_length=2048, pattern=r"^https://", json_schema_extra=_HTTPS_URL)
]
Scope = Annotated[str, Field(min_length=1, max_length=256, pattern=r"^[!#-\[\]-~]+$")]
Audience = Annotated[str, Field(min_length=1, max_length=512, pattern=r"^[^\s]+$")]


class OAuth2ClientCredentialsSource(Model):
    """A token minted per call by an OAuth 2.0 issuer for the platform's client (RFC 6749
    4.4), revoked at the call's end where the issuer offers revocation (RFC 7009)."""

    token_url: HttpsUrl
    """The issuer's token endpoint (https; a public address unless the platform lists its
    host in `TOOLADAPTER_TRUSTED_ISSUERS`)."""
    client_id: str = Field(min_length=1, max_length=256)
    """The client the token is minted for."""
    client_secret_ref: SecretKeyRef
    """The client's secret: a Secret's key in the same namespace."""
    scopes: list[Scope] = Field(default_factory=list, max_length=16)
    """Scopes asked for (`scope`)."""
    audience: Audience | None = None
    """The `audience` parameter: the API the token is for."""
    revocation_url: HttpsUrl | None = None
    """The issuer's revocation endpoint (RFC 7009): the token is revoked at the call's end."""


class TokenExchangeSource(Model):
    """A token minted per call on behalf of the calling agent (RFC 8693): the subject token
    is a TokenRequest token of the caller's ServiceAccount with audience `subjectAudience`,
    so the API it goes to sees on whose behalf. A caller that is not a ServiceAccount is
    denied."""

    token_url: HttpsUrl
    """The issuer's token endpoint (https, as for oauth2ClientCredentials)."""
    client_id: str = Field(min_length=1, max_length=256)
    """The client that exchanges."""
    client_secret_ref: SecretKeyRef
    """The client's secret: a Secret's key in the same namespace."""
    audience: Audience | None = None
    """The `audience` parameter: the API the token is for."""
    scopes: list[Scope] = Field(default_factory=list, max_length=16)
    """Scopes asked for (`scope`)."""
    subject_audience: Audience
    """The audience of the caller's ServiceAccount token (what the issuer accepts)."""
    revocation_url: HttpsUrl | None = None
    """The issuer's revocation endpoint (RFC 7009): the token is revoked at the call's end."""


_SOURCES = ("secretKeyRef", "serviceAccountToken", "oauth2ClientCredentials", "tokenExchange")


class CredentialSource(Model):
    """Where the value comes from: exactly one of `secretKeyRef`, `serviceAccountToken`,
    `oauth2ClientCredentials` or `tokenExchange`."""

    model_config = ConfigDict(
        json_schema_extra={"x-kubernetes-validations": [_exactly_one(_SOURCES, "source")]}
    )

    secret_key_ref: SecretKeyRef | None = None
    """A Secret's key in the same namespace (whoever names it must be able to read it)."""
    service_account_token: ServiceAccountTokenSource | None = None
    """A short-lived token of a ServiceAccount, minted for the call."""
    oauth2_client_credentials: OAuth2ClientCredentialsSource | None = None
    """A token an OAuth 2.0 issuer mints for the call (client credentials grant)."""
    token_exchange: TokenExchangeSource | None = None
    """A token an OAuth 2.0 issuer mints for the call on behalf of the caller (RFC 8693)."""

    def _present(self) -> list[str]:
        values = (
            self.secret_key_ref,
            self.service_account_token,
            self.oauth2_client_credentials,
            self.token_exchange,
        )
        return [name for name, value in zip(_SOURCES, values, strict=True) if value is not None]

    @model_validator(mode="after")
    def _one_source(self) -> CredentialSource:
        if len(self._present()) != 1:
            raise ValueError(f"source: set exactly one of {', '.join(_SOURCES)}")
        return self

    @property
    def kind(self) -> str:
        """The source's kind as receipts name it."""
        return self._present()[0]

    @property
    def issued(self) -> OAuth2ClientCredentialsSource | TokenExchangeSource | None:
        """The OAuth 2.0 source, when an issuer mints the value."""
        return self.oauth2_client_credentials or self.token_exchange


_HTTP_FIELDS = ("header", "scheme", "basicUsername", "methods", "paths")


class CredentialInjection(Model):
    """Where the value goes: HTTP requests to `hosts` (with `header`, `scheme`,
    `basicUsername`, `methods`, `paths`), or a read-only `file` for a container tool."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                _exactly_one(("hosts", "file"), "inject"),
                {
                    "rule": "!has(self.file) || !("
                    + " || ".join(f"has(self.{name})" for name in _HTTP_FIELDS)
                    + ")",
                    "message": "inject: header, scheme, basicUsername, methods and paths are "
                    "for HTTP injection (hosts), not for a file",
                    "reason": "FieldValueInvalid",
                },
                {
                    "rule": "!has(self.basicUsername) || !has(self.scheme)",
                    "message": "inject.scheme: basicUsername sends `Basic base64(user:value)`; "
                    "it takes no scheme",
                    "fieldPath": ".scheme",
                    "reason": "FieldValueInvalid",
                },
            ]
        }
    )

    hosts: list[HostEntryText] | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_HOSTS,
        description="Hosts whose requests carry the value: `host`, `host:port` or "
        "`*.suffix[:port]`; an entry without a port means the scheme's default port, as in "
        "egress allow entries. Each must be allowed by the tool's egress.",
    )
    header: str | None = Field(
        default=None,
        max_length=128,
        pattern=HEADER_PATTERN,
        description="The header that carries the value (default Authorization).",
    )
    scheme: str | None = Field(
        default=None,
        max_length=64,
        pattern=r"^[^\r\n]*$",
        description="Prefix of the header value (default Bearer; empty: the value alone).",
    )
    basic_username: str | None = Field(
        default=None,
        max_length=253,
        pattern=r"^[^:\r\n]*$",
        description="Send `Basic base64(basicUsername:value)` instead of `scheme value`; may "
        "not hold a colon.",
    )
    methods: list[HttpMethod] | None = Field(
        default=None,
        max_length=MAX_FILTERS,
        description="Only requests with these methods carry it (unset: every method).",
    )
    paths: list[PathPrefix] | None = Field(
        default=None,
        max_length=MAX_FILTERS,
        description="Only requests whose path starts with one of these carry it (unset: "
        "every path); compared after percent-decoding unreserved characters and removing dot "
        "segments.",
    )
    file: str | None = Field(
        default=None,
        max_length=512,
        pattern=FILE_PATTERN,
        description=f"A file below {CREDENTIAL_MOUNT_ROOT}/ holding the value, mounted "
        "read-only for a container tool's fixed command (never for shell tools or attempt "
        "workspaces).",
    )

    @model_validator(mode="after")
    def _one_form(self) -> CredentialInjection:
        if (self.hosts is None) == (self.file is None):
            raise ValueError("inject: set exactly one of hosts, file")
        if self.file is not None and any(
            value is not None
            for value in (self.header, self.scheme, self.basic_username, self.methods, self.paths)
        ):
            raise ValueError(
                "inject: header, scheme, basicUsername, methods and paths are for HTTP "
                "injection (hosts), not for a file"
            )
        if self.basic_username is not None and self.scheme is not None:
            raise ValueError("inject.scheme: basicUsername sends `Basic ...`; it takes no scheme")
        return self

    @property
    def effective_header(self) -> str:
        return self.header or DEFAULT_HEADER

    @property
    def effective_scheme(self) -> str:
        return DEFAULT_SCHEME if self.scheme is None else self.scheme


class Credential(Model):
    """One credential a call carries: its name, where the value comes from, where it goes."""

    name: str = Field(pattern=CREDENTIAL_NAME_PATTERN, max_length=63)
    """Unique in the list; receipts and status name the credential by it."""
    source: CredentialSource
    """Where the value comes from."""
    inject: CredentialInjection
    """Where the value goes."""


def credentials_field_schema(schema: JsonDict) -> None:
    """`spec.credentials` is a list map keyed by name: the API server refuses two entries of
    one name."""
    schema["x-kubernetes-list-type"] = "map"
    schema["x-kubernetes-list-map-keys"] = ["name"]
