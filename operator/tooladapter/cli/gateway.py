"""Receipt bytes from the gateway (`GET {gateway}/namespaces/{ns}/receipts/{sha256 hex}`),
asked with the user's own bearer token: the gateway checks who may read them."""

from __future__ import annotations

from urllib.parse import quote

import aiohttp

from ..pipeline.hashing import SHA256_PREFIX
from .exitcodes import CliError, ExitCode

#: Receipts are small JSON documents; anything larger is not one.
MAX_RECEIPT_BYTES = 8 * 1024 * 1024


def receipt_url(gateway: str, namespace: str, ref: str) -> str:
    digest = ref.removeprefix(SHA256_PREFIX)
    return f"{gateway.rstrip('/')}/namespaces/{quote(namespace, safe='')}/receipts/{digest}"


async def fetch_receipt(gateway: str, namespace: str, ref: str, token: str | None) -> bytes:
    if token is None:
        raise CliError(
            "the gateway needs a bearer token, and your kubeconfig user has none (client "
            "certificates?): use a token user, or --artifact-dir",
            ExitCode.FORBIDDEN,
        )
    url = receipt_url(gateway, namespace, ref)
    timeout = aiohttp.ClientTimeout(total=30)
    try:
        async with (
            aiohttp.ClientSession(timeout=timeout) as session,
            session.get(url, headers={"Authorization": f"Bearer {token}"}) as resp,
        ):
            body = await resp.content.read(MAX_RECEIPT_BYTES + 1)
            status = resp.status
    except aiohttp.ClientError as err:
        raise CliError(f"gateway {gateway}: {err}") from err
    if status == 404:
        raise CliError(f"no receipt {ref} in namespace {namespace}", ExitCode.NOT_FOUND)
    if status in (401, 403):
        raise CliError(f"the gateway refused the receipt ({status})", ExitCode.FORBIDDEN)
    if not 200 <= status <= 299:
        raise CliError(f"gateway {gateway} answered {status}")
    if len(body) > MAX_RECEIPT_BYTES:
        raise CliError(f"the gateway's answer is larger than {MAX_RECEIPT_BYTES} bytes")
    return body
