"""McpServer: a registered MCP server, its probe, and what its discovery listed.

A platform admin activates a server; only then do its credentials leave the operator, and
only to the url a probe without them verified.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field
from pydantic.config import JsonDict

from tooladapter.enums import (
    McpServerPhase,
)
from tooladapter.model.base import FREE_FORM, Model, Resource
from tooladapter.model.common import Condition
from tooladapter.model.credentials import MAX_CREDENTIALS, Credential, credentials_field_schema


class McpProbe(Model):
    """How often and how patiently the operator probes the server."""

    interval_seconds: int = Field(default=30, ge=1, le=3600)
    """Time between probes."""
    timeout_seconds: int = Field(default=10, ge=1, le=300)
    """How long one probe may take."""
    failure_threshold: int = Field(default=3, ge=1, le=100)
    """Failed probes in a row before the server is Degraded."""


#: A canonical CIDR (no host bits) narrower than the whole address space.
_CIDR: JsonDict = {
    "x-kubernetes-validations": [
        {
            "rule": "isCIDR(self) && cidr(self) == cidr(self).masked()"
            " && cidr(self).prefixLength() > 0",
            "message": "must be a canonical CIDR narrower than the whole address space,"
            " e.g. 10.0.0.0/8 or 127.0.0.1/32",
        }
    ]
}


class McpServerSpec(Model):
    """A registered MCP server: where it is and whether a platform admin activated it."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "!has(self.credentials) || self.credentials.all(c, "
                    "!has(c.inject.file) && !has(c.inject.methods) && !has(c.inject.paths))",
                    "message": "spec.credentials[].inject: a server's credentials go into its "
                    "requests (hosts, header, scheme, basicUsername); file, methods and paths "
                    "are for tools",
                    "fieldPath": ".credentials",
                    "reason": "FieldValueForbidden",
                },
            ]
        }
    )

    url: str = Field(
        min_length=1,
        max_length=2048,
        pattern=r"^https?://",
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "isURL(self) && url(self).getScheme() in ['http', 'https']"
                    " && url(self).getHostname() != ''",
                    "message": "url must be an absolute http(s) URL with a host",
                }
            ]
        },
    )
    """The server's streamable-HTTP endpoint (absolute http(s) URL)."""
    transport: Literal["streamable-http"] = "streamable-http"
    """The MCP transport; only streamable-http."""
    credentials: list[Credential] = Field(
        default_factory=list,
        max_length=MAX_CREDENTIALS,
        json_schema_extra=credentials_field_schema,
        description="Credentials sent only to an activated server at its verified url: "
        "HTTP injection only, each `inject.hosts` entry naming the url's host (with its port "
        "when the url gives one); an entry naming another host carries nothing, and the "
        "server's status says so.",
    )
    activated: bool = Field(
        default=False,
        description="Set by a platform admin to activate; the credentials are sent only to "
        "an activated server.",
    )
    retired: bool = False
    """Retire the server: its tools are unhealthy."""
    probe: McpProbe = Field(default_factory=McpProbe)
    """Probe interval, timeout and failure threshold."""
    allowed_cidrs: list[Annotated[str, Field(max_length=64, json_schema_extra=_CIDR)]] = Field(
        default_factory=list,
        max_length=32,
        description="Non-public networks the server may be reached at (loopback, private, "
        "link-local: a server in the cluster or on this machine), e.g. 10.96.0.0/12 or "
        "127.0.0.1/32; public addresses need no entry.",
    )


class McpToolInfo(Model):
    """One tool the server listed, pinned by the digest of its whole wire object."""

    name: str
    """The tool's name."""
    title: str | None = None
    """The tool's title."""
    description: str = ""
    """The tool's description (untrusted text from the server)."""
    digest: str
    """sha256 of the RFC 8785 JSON of the tool's whole wire object."""
    annotations: dict[str, Any] | None = Field(default=None, json_schema_extra=FREE_FORM)
    """The tool's annotations (untrusted hints: they may raise a class, never lower it)."""
    open_objects: list[str] | None = None
    """JSON paths of the objects of the tool's inputSchema that admit keys it does not declare
    (no `additionalProperties: false`; at most 20, `$` is the root). Descriptors of a class
    that can have effects do not bind to a tool with any. Unset: not checked yet."""


class McpResourceInfo(Model):
    """One resource the server listed."""

    uri: str
    """The resource's URI."""
    name: str = ""
    """The resource's name."""
    description: str = ""
    """The resource's description."""


class McpPromptInfo(Model):
    """One prompt the server listed."""

    name: str
    """The prompt's name."""
    description: str = ""
    """The prompt's description."""


class McpToolBinding(Model):
    """Whether a descriptor of this server is bound to a listed tool of the pinned digest."""

    descriptor: str
    """The ToolDescriptor's name."""
    tool: str
    """The server tool it names."""
    bound: bool
    """Whether the server lists the tool with the pinned digest."""
    reason: str = ""
    """Why not."""


class McpProbeResult(Model):
    """The outcome of the last probe."""

    time: str
    """When the probe ran (RFC 3339)."""
    ok: bool
    """Whether it succeeded."""
    message: str = ""
    """What it found, or why it failed."""


class McpServerStatus(Model):
    """The server's lifecycle phase and what its last discovery listed."""

    phase: McpServerPhase = McpServerPhase.REGISTERED
    """Registered, Verified, Active, Degraded or Retired."""
    message: str | None = None
    """Why the server is in its phase: a refused address (naming spec.allowedCidrs), a
    failing probe, a verified server waiting for spec.activated."""
    #: The url a probe without credentials reached (it answered, or asked for credentials
    #: with 401): the credentials are sent only to this url, and only once activated.
    verified_url: str | None = None
    """The url a probe without credentials reached: credentials go only here, and only once
    activated."""
    protocol_version: str | None = None
    """The MCP protocol version the server speaks."""
    server_name: str | None = None
    """The server's name, as it reports it."""
    server_version: str | None = None
    """The server's version, as it reports it."""
    server_digest: str | None = None
    """sha256 over the listed tools, resources and prompts."""
    tools: list[McpToolInfo] = Field(default_factory=list)
    """Tools the last discovery listed."""
    resources: list[McpResourceInfo] = Field(default_factory=list)
    """Resources the last discovery listed."""
    prompts: list[McpPromptInfo] = Field(default_factory=list)
    """Prompts the last discovery listed."""
    bindings: list[McpToolBinding] = Field(default_factory=list)
    """Descriptors naming this server, and whether each is bound."""
    shadowing: list[str] = Field(default_factory=list)
    """Tool names this server shares with other servers in the namespace."""
    last_probe: McpProbeResult | None = None
    """The last probe's outcome."""
    consecutive_failures: int = 0
    """Probes failed in a row."""
    conditions: list[Condition] = Field(default_factory=list)
    """The server's conditions."""
    observed_generation: int | None = None
    """The metadata.generation this status was computed for."""


class McpServer(Resource):
    """A registered MCP server whose discovered tools back `mcp` descriptors once activated."""

    kind: Literal["McpServer"] = "McpServer"
    spec: McpServerSpec
    status: McpServerStatus | None = None
