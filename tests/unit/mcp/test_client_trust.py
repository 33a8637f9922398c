"""The MCP client trusts what the operator's http tools trust (`TOOLADAPTER_CA_BUNDLE`,
through `egress.core.trust.settings_context`): an MCP server whose certificate a private
CA signed is reached with that context, and with the system's CAs alone it is sent
nothing."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from tooladapter.devtools import tls as test_tls
from tooladapter.devtools.tls import make_certificates
from tooladapter.egress.core.addresses import AddressRule
from tooladapter.egress.core.trust import settings_context
from tooladapter.executors.mcp import McpExecutor
from tooladapter.mcp import client as mcp_client

LOOPBACK = AddressRule.of(["127.0.0.0/8", "::1/128"])


@asynccontextmanager
async def tls_server(certs: test_tls.TestCertificates) -> AsyncIterator[tuple[int, list[bytes]]]:
    """A TLS server on loopback recording each request head and answering 404."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(certs.cert, certs.key)
    heads: list[bytes] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            heads.append(await reader.readuntil(b"\r\n\r\n"))
            writer.write(
                b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            )
            await writer.drain()
        except (OSError, asyncio.IncompleteReadError, ssl.SSLError):
            pass  # the client refused the certificate: nothing was sent
        finally:
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0, ssl=context)
    try:
        yield server.sockets[0].getsockname()[1], heads
    finally:
        server.close()


async def test_the_ca_bundle_setting_is_trusted_by_the_mcp_client(tmp_path: Path) -> None:
    certs = make_certificates(tmp_path, ["localhost"])
    trust = settings_context({"TOOLADAPTER_CA_BUNDLE": certs.ca})
    async with tls_server(certs) as (port, heads):
        url = f"https://localhost:{port}/mcp"
        untrusted = await mcp_client.probe(url, timeout=5, addresses=LOOPBACK)
        assert not untrusted.ok and heads == [], untrusted.message
        await mcp_client.probe(url, timeout=5, addresses=LOOPBACK, tls=trust)
    # The handshake passed: the server read a request (and answered 404).
    assert heads and heads[0].startswith(b"POST /mcp HTTP/1.1"), heads


def test_the_transport_and_the_executor_keep_the_context_they_are_given() -> None:
    trust = settings_context({})
    transport = mcp_client._GuardedTransport(LOOPBACK, trust)
    assert transport._pool._ssl_context is trust
    assert McpExecutor(cluster=None, catalog=None, tls=trust).tls is trust  # type: ignore[arg-type]  # not used here
