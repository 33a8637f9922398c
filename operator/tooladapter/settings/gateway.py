"""The gateway's settings: its listener, how it authenticates callers, and its fair doors."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tooladapter.settings import environ as env
from tooladapter.settings.variables import FromEnv, setting


@dataclass(frozen=True)
class GatewaySettings(FromEnv):
    """The HTTP API and MCP endpoint (`tooladapter.gateway`)."""

    #: Port of the HTTP API and MCP endpoint (`tooladapter.gateway`); 0 disables it. Every
    #: replica serves it, a standby included: it keeps no state of its own.
    port: int = setting("TOOLADAPTER_GATEWAY_PORT", env.port, 8080)
    #: Address the gateway binds.
    host: str = setting(
        "TOOLADAPTER_GATEWAY_HOST",
        env.text,
        "0.0.0.0",  # noqa: S104 - a Service in front of every replica
    )
    #: PEM certificate chain and key: the gateway speaks TLS when both are set.
    tls_cert: Path | None = setting("TOOLADAPTER_GATEWAY_TLS_CERT", env.path, None)
    tls_key: Path | None = setting("TOOLADAPTER_GATEWAY_TLS_KEY", env.path, None)
    #: Audiences a caller's token must carry (TokenReview); empty: the API server's default.
    audiences: tuple[str, ...] = setting("TOOLADAPTER_GATEWAY_AUDIENCES", env.listed, ())
    #: How long a tools/call waits for an approval before answering "still pending".
    approval_wait_seconds: int = setting(
        "TOOLADAPTER_GATEWAY_APPROVAL_WAIT_SECONDS", env.at_least(0), 300
    )
    #: The gateway's address as people reach it (e.g. https://tools.example.com): the base of
    #: the reviewers' page links MCP clients get for a gated call (URL elicitation). Unset:
    #: no links (the host a client sent is never trusted to build one); such calls are held
    #: and answered as still pending, as for a client that cannot open a URL.
    public_url: str | None = setting("TOOLADAPTER_GATEWAY_PUBLIC_URL", env.public_url, None)
    #: Fair doors (`gateway.doors`): requests one caller / one namespace may have in
    #: progress at once, and live streams (the page's live updates) plus MCP follows of a
    #: call; beyond them 429 with `Retry-After`. A caller's requests must stay below the
    #: caller pool's connections (`connections`) so one caller cannot take it.
    caller_requests: int = setting("TOOLADAPTER_GATEWAY_CALLER_REQUESTS", env.at_least(1), 32)
    namespace_requests: int = setting("TOOLADAPTER_GATEWAY_NAMESPACE_REQUESTS", env.at_least(1), 64)
    caller_streams: int = setting("TOOLADAPTER_GATEWAY_CALLER_STREAMS", env.at_least(1), 16)
    namespace_streams: int = setting("TOOLADAPTER_GATEWAY_NAMESPACE_STREAMS", env.at_least(1), 48)
    #: Connections of the caller pool for requests, and of the separate one for watches.
    connections: int = setting("TOOLADAPTER_GATEWAY_CONNECTIONS", env.at_least(1), 100)
    stream_connections: int = setting(
        "TOOLADAPTER_GATEWAY_STREAM_CONNECTIONS", env.at_least(1), 100
    )
    #: Total timeout of every API request the gateway makes (a watch: its own length + 30 s).
    api_timeout_seconds: int = setting(
        "TOOLADAPTER_GATEWAY_API_TIMEOUT_SECONDS", env.at_least(1), 30
    )
    #: A token the API server rejected is answered 401 from memory this long (by sha256).
    rejected_token_seconds: int = setting(
        "TOOLADAPTER_GATEWAY_REJECTED_TOKEN_SECONDS", env.at_least(0), 10
    )
    #: Failed authentications per client address: a burst, then so many a minute (429).
    auth_failures_burst: int = setting(
        "TOOLADAPTER_GATEWAY_AUTH_FAILURES_BURST", env.at_least(0), 20
    )
    auth_failures_per_minute: int = setting(
        "TOOLADAPTER_GATEWAY_AUTH_FAILURES_PER_MINUTE", env.at_least(1), 30
    )
    #: Addresses or CIDRs of reverse proxies whose `X-Forwarded-For` names the client
    #: (for the failed-authentication limit); empty: the peer address is the client's.
    trusted_proxies: tuple[str, ...] = setting(
        "TOOLADAPTER_GATEWAY_TRUSTED_PROXIES", env.listed, ()
    )
    #: Wrap a tool's text in MCP results between `<tool-result id=NONCE>` delimiters (a
    #: descriptor's `resultDelimiters` overrides it). On by default: the model reading the
    #: result then sees where the tool's data ends, and a tool cannot close it early.
    result_delimiters: bool = setting("TOOLADAPTER_RESULT_DELIMITERS", env.boolean, True)

    def __post_init__(self) -> None:
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ValueError(
                "TOOLADAPTER_GATEWAY_TLS_CERT and TOOLADAPTER_GATEWAY_TLS_KEY go together: "
                "set both for TLS, or neither"
            )
