"""Reads from the gateway, asked with the user's own bearer token (the gateway checks who
may read what): receipt bytes (`GET {gateway}/namespaces/{ns}/receipts/{sha256 hex}`), a
run's receipts (`GET {gateway}/namespaces/{ns}/runs/{runId}/tool-receipts`), which include
calls whose invocations retention deleted (the store's run index), and a call's whole
result (`GET {gateway}/namespaces/{ns}/tool-invocations/{name}/result`)."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

import aiohttp

from tooladapter.cli.exitcodes import CliError, ExitCode
from tooladapter.pipeline.hashing import SHA256_PREFIX

#: Receipts are small JSON documents; anything larger is not one.
MAX_RECEIPT_BYTES = 8 * 1024 * 1024


def receipt_url(gateway: str, namespace: str, ref: str) -> str:
    digest = ref.removeprefix(SHA256_PREFIX)
    return f"{gateway.rstrip('/')}/namespaces/{quote(namespace, safe='')}/receipts/{digest}"


def run_receipts_url(gateway: str, namespace: str, run_id: str, caller: str | None = None) -> str:
    ns, run = quote(namespace, safe=""), quote(run_id, safe="")
    url = f"{gateway.rstrip('/')}/namespaces/{ns}/runs/{run}/tool-receipts"
    return f"{url}?caller={quote(caller, safe='')}" if caller else url


async def fetch_receipt(gateway: str, namespace: str, ref: str, token: str | None) -> bytes:
    url = receipt_url(gateway, namespace, ref)
    return await _get(gateway, url, token, f"no receipt {ref} in namespace {namespace}")


def result_url(gateway: str, namespace: str, name: str) -> str:
    ns, call = quote(namespace, safe=""), quote(name, safe="")
    return f"{gateway.rstrip('/')}/namespaces/{ns}/tool-invocations/{call}/result"


async def fetch_result(gateway: str, namespace: str, name: str, token: str | None) -> bytes:
    """A call's whole result as stored (the gateway serves it to who may get the call)."""
    url = result_url(gateway, namespace, name)
    return await _get(gateway, url, token, f"no stored result of {name} in namespace {namespace}")


async def fetch_run_receipts(
    gateway: str, namespace: str, run_id: str, token: str | None, caller: str | None = None
) -> list[dict[str, Any]]:
    """The gateway's rows of a run (see gateway/routes/runs.py), of `caller` alone if set."""
    url = run_receipts_url(gateway, namespace, run_id, caller)
    body = await _get(gateway, url, token, f"no namespace {namespace}")
    try:
        items = json.loads(body)["items"]
    except (ValueError, KeyError, TypeError) as err:
        raise CliError(f"gateway {gateway}: not a run's receipts ({err})") from err
    if not isinstance(items, list):
        raise CliError(f"gateway {gateway}: not a run's receipts")
    return [row for row in items if isinstance(row, dict)]


async def fetch_chain_head(gateway: str, namespace: str, token: str | None) -> dict[str, Any]:
    """The namespace's incarnation and its chain's published head, from the gateway."""
    url = f"{gateway.rstrip('/')}/namespaces/{quote(namespace, safe='')}/receipt-chain"
    body = await _get(gateway, url, token, f"no namespace {namespace}")
    try:
        value = json.loads(body)
    except ValueError as err:
        raise CliError(f"gateway {gateway}: not a chain head ({err})") from err
    if not isinstance(value, dict):
        raise CliError(f"gateway {gateway}: not a chain head")
    return value


async def fetch_receipt_keys(gateway: str) -> bytes:
    """The gateway's public receipt keys (`GET /receipt-keys`: public, no token)."""
    return await _get(gateway, f"{gateway.rstrip('/')}/receipt-keys", "", "no /receipt-keys")


async def _get(gateway: str, url: str, token: str | None, missing: str) -> bytes:
    if token is None:
        raise CliError(
            "the gateway needs a bearer token, and your kubeconfig user has none (client "
            "certificates?): use a token user, or --artifact-dir",
            ExitCode.FORBIDDEN,
        )
    timeout = aiohttp.ClientTimeout(total=30)
    try:
        async with (
            aiohttp.ClientSession(timeout=timeout) as session,
            session.get(url, headers={"Authorization": f"Bearer {token}"} if token else {}) as resp,
        ):
            body = await resp.content.read(MAX_RECEIPT_BYTES + 1)
            status = resp.status
    except aiohttp.ClientError as err:
        raise CliError(f"gateway {gateway}: {err}") from err
    if status == 404:
        raise CliError(missing, ExitCode.NOT_FOUND)
    if status in (401, 403):
        raise CliError(
            f"the gateway refused the request ({status}){_detail(body)}", ExitCode.FORBIDDEN
        )
    if not 200 <= status <= 299:
        raise CliError(f"gateway {gateway} answered {status}")
    if len(body) > MAX_RECEIPT_BYTES:
        raise CliError(f"the gateway's answer is larger than {MAX_RECEIPT_BYTES} bytes")
    return body


def _detail(body: bytes) -> str:
    """A problem document's detail (RFC 9457), as `: detail`; else nothing."""
    try:
        detail = json.loads(body).get("detail")
    except (ValueError, AttributeError):
        return ""
    return f": {detail}" if isinstance(detail, str) and detail else ""
