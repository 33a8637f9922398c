"""The gateway's settings: its listener, how it authenticates callers, and its fair doors."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from tooladapter.settings import environ as env


@dataclass(frozen=True)
class GatewaySettings:
    """The HTTP API and MCP endpoint (`tooladapter.gateway`)."""

    #: Port of the HTTP API and MCP endpoint (`tooladapter.gateway`); 0 disables it. Every
    #: replica serves it, a standby included: it keeps no state of its own.
    port: int = 8080
    #: Address the gateway binds.
    host: str = "0.0.0.0"  # noqa: S104 - a Service in front of every replica
    #: PEM certificate chain and key: the gateway speaks TLS when both are set.
    tls_cert: Path | None = None
    tls_key: Path | None = None
    #: Audiences a caller's token must carry (TokenReview); empty: the API server's default.
    audiences: tuple[str, ...] = ()
    #: How long a tools/call waits for an approval before answering "still pending".
    approval_wait_seconds: int = 300
    #: The gateway's address as people reach it (e.g. https://tools.example.com): the base of
    #: the reviewers' page links MCP clients get for a gated call (URL elicitation). Unset:
    #: no links (the host a client sent is never trusted to build one); such calls are held
    #: and answered as still pending, as for a client that cannot open a URL.
    public_url: str | None = None
    #: Fair doors (`gateway.doors`): requests one caller / one namespace may have in
    #: progress at once, and live streams (the page's live updates) plus MCP follows of a
    #: call; beyond them 429 with `Retry-After`. A caller's requests must stay below the
    #: caller pool's connections (`connections`) so one caller cannot take it.
    caller_requests: int = 32
    namespace_requests: int = 64
    caller_streams: int = 16
    namespace_streams: int = 48
    #: Connections of the caller pool for requests, and of the separate one for watches.
    connections: int = 100
    stream_connections: int = 100
    #: Total timeout of every API request the gateway makes (a watch: its own length + 30 s).
    api_timeout_seconds: int = 30
    #: A token the API server rejected is answered 401 from memory this long (by sha256).
    rejected_token_seconds: int = 10
    #: Failed authentications per client address: a burst, then so many a minute (429).
    auth_failures_burst: int = 20
    auth_failures_per_minute: int = 30
    #: Addresses or CIDRs of reverse proxies whose `X-Forwarded-For` names the client
    #: (for the failed-authentication limit); empty: the peer address is the client's.
    trusted_proxies: tuple[str, ...] = ()
    #: Wrap a tool's text in MCP results between `<tool-result id=NONCE>` delimiters (a
    #: descriptor's `resultDelimiters` overrides it). On by default: the model reading the
    #: result then sees where the tool's data ends, and a tool cannot close it early.
    result_delimiters: bool = True

    def __post_init__(self) -> None:
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ValueError(
                "TOOLADAPTER_GATEWAY_TLS_CERT and TOOLADAPTER_GATEWAY_TLS_KEY go together: "
                "set both for TLS, or neither"
            )

    @classmethod
    def from_env(cls) -> GatewaySettings:
        base = cls()
        return cls(
            port=env.port("TOOLADAPTER_GATEWAY_PORT", base.port),
            host=os.environ.get("TOOLADAPTER_GATEWAY_HOST") or base.host,
            tls_cert=env.path("TOOLADAPTER_GATEWAY_TLS_CERT"),
            tls_key=env.path("TOOLADAPTER_GATEWAY_TLS_KEY"),
            audiences=env.listed("TOOLADAPTER_GATEWAY_AUDIENCES", base.audiences),
            approval_wait_seconds=env.at_least(
                "TOOLADAPTER_GATEWAY_APPROVAL_WAIT_SECONDS", base.approval_wait_seconds, 0
            ),
            public_url=env.public_url("TOOLADAPTER_GATEWAY_PUBLIC_URL"),
            caller_requests=env.at_least(
                "TOOLADAPTER_GATEWAY_CALLER_REQUESTS", base.caller_requests, 1
            ),
            namespace_requests=env.at_least(
                "TOOLADAPTER_GATEWAY_NAMESPACE_REQUESTS", base.namespace_requests, 1
            ),
            caller_streams=env.at_least(
                "TOOLADAPTER_GATEWAY_CALLER_STREAMS", base.caller_streams, 1
            ),
            namespace_streams=env.at_least(
                "TOOLADAPTER_GATEWAY_NAMESPACE_STREAMS", base.namespace_streams, 1
            ),
            connections=env.at_least("TOOLADAPTER_GATEWAY_CONNECTIONS", base.connections, 1),
            stream_connections=env.at_least(
                "TOOLADAPTER_GATEWAY_STREAM_CONNECTIONS", base.stream_connections, 1
            ),
            api_timeout_seconds=env.at_least(
                "TOOLADAPTER_GATEWAY_API_TIMEOUT_SECONDS", base.api_timeout_seconds, 1
            ),
            rejected_token_seconds=env.at_least(
                "TOOLADAPTER_GATEWAY_REJECTED_TOKEN_SECONDS", base.rejected_token_seconds, 0
            ),
            auth_failures_burst=env.at_least(
                "TOOLADAPTER_GATEWAY_AUTH_FAILURES_BURST", base.auth_failures_burst, 0
            ),
            auth_failures_per_minute=env.at_least(
                "TOOLADAPTER_GATEWAY_AUTH_FAILURES_PER_MINUTE", base.auth_failures_per_minute, 1
            ),
            trusted_proxies=env.listed("TOOLADAPTER_GATEWAY_TRUSTED_PROXIES", base.trusted_proxies),
            result_delimiters=env.boolean("TOOLADAPTER_RESULT_DELIMITERS", base.result_delimiters),
        )
