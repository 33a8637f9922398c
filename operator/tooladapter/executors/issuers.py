"""The HTTP side of OAuth 2.0 issuers (`credentials.issuers` is the pure side): the
operator posts a client's secret to a token endpoint, so each request goes only to a
verified https server at an address the platform allows.

An endpoint's host must resolve to public addresses unless the platform lists it in
`TOOLADAPTER_TRUSTED_ISSUERS` (no tenant may point the operator's POST of a client secret at
an internal service); names mapped by `TOOLADAPTER_EGRESS_HOSTS` (tests) resolve as for
http tools, but their mapped address counts as an allowance only for a trusted issuer (the
mapping says where a name is, not that client secrets may be posted there). TLS is verified
against the system's CAs plus `TOOLADAPTER_EGRESS_CA_FILE`.
"""

from __future__ import annotations

import asyncio
import base64
import ssl
from collections.abc import Mapping
from urllib.parse import quote_plus

import aiohttp
from yarl import URL

from tooladapter.credentials.issuers import (
    IssuerUnreachable,
    Minted,
    TokenIssuer,
    parse_token_response,
    revocation_form,
)
from tooladapter.egress.core.addresses import AddressRefused, AddressRule
from tooladapter.egress.core.hosts import is_ip
from tooladapter.egress.core.rules import normalize_host
from tooladapter.executors.http import GuardedResolver

#: A token endpoint that does not answer in this long ends the call Failed, transient.
TOKEN_TIMEOUT_SECONDS = 10.0
#: An answer larger than this is no token response.
MAX_ANSWER_BYTES = 64 * 1024
#: Every address: what a trusted issuer's host may resolve to (blocked hosts still apply).
_ANYWHERE = ("0.0.0.0/0", "::/0")


def basic_authorization(client_id: str, client_secret: str) -> str:
    """HTTP Basic of a client (RFC 6749 2.3.1: each part form-urlencoded first, so a colon
    in the id or the secret cannot shift the split)."""
    pair = f"{quote_plus(client_id)}:{quote_plus(client_secret)}"
    return "Basic " + base64.b64encode(pair.encode()).decode()


class HttpIssuers(TokenIssuer):
    """One session per address rule (public only, or a trusted issuer's), closed with the
    operator."""

    def __init__(
        self,
        *,
        trusted: tuple[str, ...] = (),
        blocked: tuple[str, ...] = (),
        hosts: Mapping[str, str] | None = None,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.trusted = frozenset(normalize_host(h) for h in trusted)
        self.blocked = blocked
        self.hosts = dict(hosts or {})
        self.tls = tls if tls is not None else ssl.create_default_context()
        self.sessions: dict[bool, aiohttp.ClientSession] = {}

    def _session(self, url: str) -> aiohttp.ClientSession:
        # Parsed as aiohttp parses it, so the host judged is the host connected to.
        try:
            parts = URL(url)
        except ValueError:
            raise IssuerUnreachable("not a valid URL") from None
        if parts.scheme != "https" or not parts.host:
            raise IssuerUnreachable(f"{url}: not an https URL")
        if parts.raw_user is not None or parts.raw_password is not None:
            # aiohttp would refuse it beside our Authorization (a bare ValueError); and a
            # URL's credentials are no part of a token endpoint's address.
            raise IssuerUnreachable("a token endpoint's URL may not hold a user or password")
        trusted = normalize_host(parts.host) in self.trusted
        rule = AddressRule.of(_ANYWHERE if trusted else (), self.blocked)
        if is_ip(parts.host):
            # aiohttp never resolves an IP literal: judged here, as the resolver judges names.
            rule.permitted(parts.host, [parts.host])
        session = self.sessions.get(trusted)
        if session is None or session.closed:
            # A mapped name's address is an allowance only for a trusted issuer.
            resolver = GuardedResolver(rule, overrides=self.hosts, mapped_allowed=trusted)
            session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(resolver=resolver, ssl=self.tls),
                cookie_jar=aiohttp.DummyCookieJar(),
            )
            self.sessions[trusted] = session
        return session

    async def _post(
        self, url: str, client_id: str, client_secret: str, form: dict[str, str], timeout: float
    ) -> tuple[int, bytes]:
        try:
            session = self._session(url)
            async with asyncio.timeout(timeout):
                async with session.post(
                    url,
                    data=form,
                    allow_redirects=False,
                    headers={
                        "Accept": "application/json",
                        "Authorization": basic_authorization(client_id, client_secret),
                    },
                ) as response:
                    # `read(n)` returns what has arrived, up to n: read on to the end or
                    # just past the bound (an answer in several chunks is still whole).
                    body = b""
                    while len(body) <= MAX_ANSWER_BYTES:
                        chunk = await response.content.read(MAX_ANSWER_BYTES + 1 - len(body))
                        if not chunk:
                            break
                        body += chunk
                    return response.status, body
        except TimeoutError:
            raise IssuerUnreachable(f"{url}: no answer in {timeout:g}s") from None
        except AddressRefused as exc:
            raise IssuerUnreachable(f"{url}: {exc}") from None
        except aiohttp.ClientConnectorError as exc:
            # The resolver's refusal arrives wrapped (as a DNS error): say why, not "[None]".
            reason = exc.os_error if isinstance(exc.os_error, AddressRefused) else exc
            raise IssuerUnreachable(f"{url}: {type(exc).__name__}: {reason}") from None
        except (aiohttp.ClientError, OSError) as exc:
            raise IssuerUnreachable(f"{url}: {type(exc).__name__}: {exc}") from None

    async def token(
        self, url: str, client_id: str, client_secret: str, form: dict[str, str]
    ) -> Minted:
        status, body = await self._post(url, client_id, client_secret, form, TOKEN_TIMEOUT_SECONDS)
        if len(body) > MAX_ANSWER_BYTES:
            raise IssuerUnreachable(f"{url}: the answer is larger than {MAX_ANSWER_BYTES} bytes")
        return parse_token_response(status, body)

    async def revoke(
        self, url: str, client_id: str, client_secret: str, token: str, timeout: float
    ) -> bool:
        """True when the issuer confirmed (RFC 7009 2.2: 200); False otherwise."""
        try:
            status, _ = await self._post(
                url, client_id, client_secret, revocation_form(token), timeout
            )
        except IssuerUnreachable:
            return False
        return status == 200

    async def close(self) -> None:
        held, self.sessions = list(self.sessions.values()), {}
        for session in held:
            await session.close()
