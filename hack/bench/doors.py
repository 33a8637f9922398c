"""Part 8, doors: another namespace's tools list through the gateway, alone and while one
agent holds BENCH_DOORS_STREAMS (150) live streams of the reviewers' page (issue 28's
fair doors). Reported side by side (p50/p95/max of BENCH_DOORS_LISTS sequential lists),
with how many streams the gateway held and how many it refused (429 + Retry-After)."""

from __future__ import annotations

import asyncio
import os
import re
import time
from typing import Any

import aiohttp
from kubernetes import client

from tooladapter import GROUP, VERSION
from tooladapter.devtools import token_for

from .base import BenchBase


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 4) if ordered else 0.0


class Doors(BenchBase):
    def _tenant(self) -> tuple[str, str]:
        """A second namespace with an agent granted `list-tools`: (namespace, token)."""
        ns = f"{self.ns}-doors"
        core, rbac = client.CoreV1Api(self.admin), client.RbacAuthorizationV1Api(self.admin)
        core.create_namespace({"metadata": {"name": ns}})
        token = token_for(self.admin, ns, "agent-2", seconds=3600)
        rbac.create_namespaced_role(
            ns,
            {
                "metadata": {"name": "doors"},
                "rules": [
                    {
                        "apiGroups": [GROUP],
                        "resources": ["tooldescriptors"],
                        "verbs": ["invoke"],
                        "resourceNames": ["list-tools"],
                    }
                ],
            },
        )
        for kind, role in (("ClusterRole", "tooladapter-requester"), ("Role", "doors")):
            rbac.create_namespaced_role_binding(
                ns,
                {
                    "metadata": {"name": f"agent-2-{role}"},
                    "roleRef": {
                        "apiGroup": "rbac.authorization.k8s.io",
                        "kind": kind,
                        "name": role,
                    },
                    "subjects": [{"kind": "ServiceAccount", "name": "agent-2", "namespace": ns}],
                },
            )
        client.CustomObjectsApi(self.admin).create_namespaced_custom_object(
            GROUP,
            VERSION,
            ns,
            "tooldescriptors",
            {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": "ToolDescriptor",
                "metadata": {"name": "list-tools"},
                "spec": {
                    "toolId": "list-tools",
                    "version": "1.0.0",
                    "kind": "native",
                    "native": {"name": "list-tools"},
                    "description": "bench",
                    "inputSchema": {"type": "object"},
                    "sideEffectClass": "read",
                },
            },
        )
        return ns, token

    async def _lists(
        self, http: aiohttp.ClientSession, url: str, token: str, n: int
    ) -> dict[str, Any]:
        times: list[float] = []
        statuses: dict[int, int] = {}
        for _ in range(n):
            started = time.perf_counter()
            async with http.get(url, headers={"Authorization": f"Bearer {token}"}) as r:
                await r.read()
                statuses[r.status] = statuses.get(r.status, 0) + 1
            times.append(time.perf_counter() - started)
        return {
            "p50_s": _pct(times, 0.5),
            "p95_s": _pct(times, 0.95),
            "max_s": round(max(times), 4),
            "statuses": statuses,
        }

    async def doors(self) -> None:
        assert self.operator is not None
        streams = int(os.environ.get("BENCH_DOORS_STREAMS", "150"))
        lists = int(os.environ.get("BENCH_DOORS_LISTS", "20"))
        base = self.operator.gateway_url
        ns, token = await asyncio.to_thread(self._tenant)
        url = f"{base}/namespaces/{ns}/tools"
        holder = await asyncio.to_thread(token_for, self.admin, self.ns, "agent-0", seconds=3600)
        report: dict[str, Any] = {"streams_offered": streams}
        timeout = aiohttp.ClientTimeout(total=300)
        jar = aiohttp.CookieJar(unsafe=True)
        async with aiohttp.ClientSession(
            timeout=timeout, cookie_jar=jar, connector=aiohttp.TCPConnector(limit=0)
        ) as http:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:  # the descriptor becomes active
                async with http.get(url, headers={"Authorization": f"Bearer {token}"}) as r:
                    if r.status == 200 and (await r.json()).get("items"):
                        break
                await asyncio.sleep(1)
            report["alone"] = await self._lists(http, url, token, lists)
            async with http.get(f"{base}/ui/login") as form:
                nonce = re.search(r'name="nonce" value="([^"]+)"', await form.text())
            assert nonce is not None
            data = {"nonce": nonce.group(1), "token": holder, "namespaces": ""}
            async with http.post(f"{base}/ui/login", data=data, allow_redirects=False):
                pass
            held: list[aiohttp.ClientResponse] = []
            refused = 0

            async def hold() -> None:
                nonlocal refused
                response = await http.get(f"{base}/ui/events")
                if response.status == 200:
                    await response.content.readline()
                    held.append(response)
                else:
                    refused += 1
                    response.release()

            await asyncio.gather(*(hold() for _ in range(streams)))
            report["streams_held"], report["streams_refused_429"] = len(held), refused
            try:
                report["with_streams"] = await self._lists(http, url, token, lists)
            finally:
                for response in held:
                    response.close()
        await asyncio.to_thread(client.CoreV1Api(self.admin).delete_namespace, ns)
        self.report["doors"] = report
        print(
            f"doors: another namespace's tools list p50/p95 {report['alone']['p50_s']}/"
            f"{report['alone']['p95_s']} s alone, {report['with_streams']['p50_s']}/"
            f"{report['with_streams']['p95_s']} s with {streams} streams offered by one agent "
            f"({len(held)} held, {refused} refused 429)"
        )
