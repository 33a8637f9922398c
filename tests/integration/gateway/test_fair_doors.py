"""Fair doors on the real cluster (issue 28): one tenant holding its caps leaves another
tenant served; what anyone can make the gateway ask the API server is bounded; metric
labels never come from what a caller typed.

Counts are read from the operator's own counter of the reviews the gateway asked
(`tooladapter_gateway_reviews_total{kind}`) and, beside it, from the API server's
`apiserver_request_total{resource=...}` (the admin client's /metrics), before and after.
No timing assertion: waits are bounded, answers are asserted.
"""

from __future__ import annotations

import asyncio
import re
import secrets
import subprocess
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import Any, cast

import aiohttp
import pytest
from kubernetes import client

from tests.integration.gateway_client import http_json, token_of
from tests.integration.objects import Agent, descriptor
from tooladapter.devtools import Namespace, OperatorProcess, kubeconfig
from tooladapter.settings import Settings

NATIVE: dict[str, Any] = {"kind": "native", "native": {"name": "list-tools"}}
DEFAULTS = Settings()


#: The loopback address the random-token test sends from (the kernel routes 127.0.0.0/8 to
#: lo): it exhausts only its own failed-authentication bucket.
OWN_ADDRESS = "127.0.0.7"


def operator_metrics(operator: OperatorProcess) -> str:
    url = f"http://127.0.0.1:{operator.metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=30) as response:
        return response.read().decode()


def metric(text: str, name: str, **labels: str) -> float:
    """The sum of the samples of `name` whose labels include `labels`."""
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        if all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


def reviews(operator: OperatorProcess, kind: str) -> float:
    return metric(operator_metrics(operator), "tooladapter_gateway_reviews_total", kind=kind)


def apiserver_requests(api: client.ApiClient, resource: str) -> float:
    """POSTs the API server counted for `resource` (e.g. tokenreviews), from all clients."""
    del api  # read with kubectl: the admin's kubeconfig
    text = subprocess.run(
        ["kubectl", "--kubeconfig", kubeconfig(), "get", "--raw", "/metrics"],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout
    return metric(text, "apiserver_request_total", resource=resource, verb="POST")


def test_150_live_streams_of_one_agent_leave_another_namespace_served(
    api: client.ApiClient, operator: OperatorProcess, agent: Agent
) -> None:
    other_ns = Namespace(api)
    try:
        other = Agent.create(api, other_ns.name, "agent-2")
        descriptor(api, other_ns.name, "list-tools", **NATIVE)
        other.grant(["list-tools"], ["read"])
        outcome = asyncio.run(_hold_streams_and_list(operator, agent, other, 150))
    finally:
        other_ns.delete()
    held, refused, retry_after, status, tools = outcome
    # The agent holds at most its cap; the rest were told to come back later.
    assert held <= DEFAULTS.gateway.caller_streams
    assert held + refused == 150, outcome
    assert refused >= 150 - DEFAULTS.gateway.caller_streams
    assert retry_after and all(int(v) >= 1 for v in retry_after)
    # The other tenant's tools list is answered while the streams are held.
    assert status == 200, tools
    assert [t["toolId"] for t in tools["items"]] == ["list-tools"]


async def sign_in(http: aiohttp.ClientSession, base: str, token: str) -> None:
    async with http.get(f"{base}/ui/login") as form:
        page = await form.text()
    nonce = re.search(r'name="nonce" value="([^"]+)"', page)
    assert nonce, page[:500]
    data = {"nonce": nonce.group(1), "token": token, "namespaces": ""}
    async with http.post(f"{base}/ui/login", data=data, allow_redirects=False) as answer:
        assert answer.status in (302, 303), await answer.text()


async def _hold_streams_and_list(
    operator: OperatorProcess, agent: Agent, other: Agent, count: int
) -> tuple[int, int, list[str], int, Any]:
    base = operator.gateway_url
    jar = aiohttp.CookieJar(unsafe=True)
    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=120)
    async with aiohttp.ClientSession(cookie_jar=jar, connector=connector, timeout=timeout) as http:
        await sign_in(http, base, token_of(agent))
        responses: list[aiohttp.ClientResponse] = []
        refused = 0
        retry_after: list[str] = []

        async def open_stream() -> None:
            nonlocal refused
            response = await http.get(f"{base}/ui/events")
            if response.status == 200:
                await response.content.readline()  # the stream is open and answering
                responses.append(response)
            else:
                assert response.status == 429, response.status
                retry_after.append(response.headers.get("Retry-After", ""))
                refused += 1
                response.release()

        await asyncio.gather(*(open_stream() for _ in range(count)))
        try:
            token = token_of(other)
            url = f"{base}/namespaces/{other.namespace}/tools"
            status, _, tools = await asyncio.wait_for(
                asyncio.to_thread(http_json, "GET", url, token, timeout=90), 100
            )
        finally:
            for response in responses:
                response.close()
    return len(responses), refused, retry_after, status, tools


# It counts the API server's TokenReviews, which every gateway of a parallel run adds to.
@pytest.mark.cluster_wide
def test_1000_random_tokens_cost_a_bounded_number_of_token_reviews(
    api: client.ApiClient, operator: OperatorProcess, ns: Namespace
) -> None:
    before = reviews(operator, "tokenreview")
    server_before = apiserver_requests(api, "tokenreviews")
    started = time.monotonic()
    statuses = asyncio.run(_random_tokens(operator.gateway_url, ns.name, 1000))
    elapsed = time.monotonic() - started
    made = reviews(operator, "tokenreview") - before
    server_made = apiserver_requests(api, "tokenreviews") - server_before
    print(
        f"1000 random tokens in {elapsed:.1f} s: {statuses}; TokenReviews by the gateway "
        f"{made:.0f}, by the API server's count {server_made:.0f}"
    )
    assert statuses.get(401, 0) + statuses.get(429, 0) == 1000, statuses
    # The burst, then the per-minute rate over the time the requests took (+1 for rounding).
    bound = (
        DEFAULTS.gateway.auth_failures_burst
        + DEFAULTS.gateway.auth_failures_per_minute * elapsed / 60
        + 1
    )
    assert made <= bound, (made, bound)
    # The API server counts every client's TokenReviews (the kubelet's too): some slack.
    assert server_made <= bound + 10, (server_made, bound)
    # A token beyond the size cap is refused without a review (aiohttp's header limit,
    # 8 KiB a line, answers 400 before the gateway's own 16 KiB cap could).
    before = reviews(operator, "tokenreview")
    request = urllib.request.Request(
        f"{operator.gateway_url}/namespaces/{ns.name}/tools",
        headers={"Authorization": "Bearer " + "x" * 20_000},
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            status = response.status
    except urllib.error.HTTPError as exc:
        status = exc.code
    assert status in (400, 401, 429)
    assert reviews(operator, "tokenreview") == before


async def _random_tokens(base: str, namespace: str, count: int) -> dict[int, int]:
    statuses: dict[int, int] = {}
    gate = asyncio.Semaphore(20)
    # From an address of its own on loopback: the failed-authentication limit is per client
    # address, and the session's other tests sign in from 127.0.0.1 (`OWN_ADDRESS`).
    connector = aiohttp.TCPConnector(local_addr=(OWN_ADDRESS, 0))
    async with aiohttp.ClientSession(
        timeout=aiohttp.ClientTimeout(total=60), connector=connector
    ) as http:

        async def one() -> None:
            headers = {"Authorization": f"Bearer {secrets.token_urlsafe(32)}"}
            async with gate, http.get(f"{base}/namespaces/{namespace}/tools", headers=headers) as r:
                statuses[r.status] = statuses.get(r.status, 0) + 1
                if r.status == 429:
                    assert int(r.headers["Retry-After"]) >= 1

        await asyncio.gather(*(one() for _ in range(count)))
    return statuses


def test_a_tools_list_among_150_descriptors_costs_a_bounded_number_of_reviews(
    api: client.ApiClient, operator: OperatorProcess, ns: Namespace, agent: Agent
) -> None:
    ids = [f"tool-{i:03d}" for i in range(150)]
    with ThreadPoolExecutor(8) as pool:
        list(
            pool.map(
                lambda t: descriptor(api, ns.name, t, wait_active=False, **NATIVE),
                ids,
            )
        )
    agent.grant(ids, ["read"])
    token = token_of(agent)
    url = f"{operator.gateway_url}/namespaces/{ns.name}/tools"
    deadline = time.monotonic() + 180
    tools: Any = {"items": []}
    while time.monotonic() < deadline:
        status, _, tools = http_json("GET", url, token)
        assert status == 200, tools
        if len(tools["items"]) == 150:
            break
        time.sleep(2)
    assert len(tools["items"]) == 150
    kinds = ("subjectaccessreview", "selfsubjectrulesreview")
    before = {k: reviews(operator, k) for k in kinds}
    server_before = apiserver_requests(api, "subjectaccessreviews")
    status, _, tools = http_json("GET", url, token)
    assert status == 200 and len(tools["items"]) == 150
    made = {k: reviews(operator, k) - before[k] for k in kinds}
    server_made = apiserver_requests(api, "subjectaccessreviews") - server_before
    print(
        f"one tools list among 150 descriptors: {made}; SARs by the API server's count: "
        f"{server_made:.0f}"
    )
    assert made["selfsubjectrulesreview"] == 1
    assert made["subjectaccessreview"] == 0
    # Other clients (the operator's own pipeline, controllers) may ask a few meanwhile.
    assert server_made <= 10


def test_1500_calls_naming_random_tools_leave_the_metrics_page_bounded(
    api: client.ApiClient, operator: OperatorProcess, ns: Namespace, agent: Agent
) -> None:
    before = operator_metrics(operator)
    names = [f"random-{secrets.token_hex(6)}" for _ in range(1500)]

    def call(tool: str) -> str:
        return agent.invoke(tool, {}, name=f"call-{tool}")

    with ThreadPoolExecutor(8) as pool:
        calls = list(pool.map(call, names))
    custom = client.CustomObjectsApi(api)

    def ended() -> int:
        items = cast(
            dict[str, Any],
            custom.list_namespaced_custom_object(
                "tooladapter.dev", "v1alpha1", ns.name, "toolinvocations"
            ),
        )["items"]
        return sum(1 for i in items if (i.get("status") or {}).get("state") == "Denied")

    deadline = time.monotonic() + 600
    while ended() < len(calls) and time.monotonic() < deadline:
        time.sleep(5)
    assert ended() == len(calls)
    after = operator_metrics(operator)
    grown = len(after.encode()) - len(before.encode())
    print(f"metrics page: {len(before.encode())} -> {len(after.encode())} bytes (+{grown})")
    assert not any(name in after for name in names)
    assert f'tenant="{ns.name}",tool="unknown"' in after
    # New series: this namespace's (a handful per metric), never one per call.
    assert grown < 16 * 1024, grown
