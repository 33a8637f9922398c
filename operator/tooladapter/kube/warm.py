"""Warm pods on the API server: create, claim, wait ready, exec one call, delete.

`pipeline.warm` builds what is sent here. A claim is a label patch that carries the pod's
resourceVersion, so the API server takes exactly one claim of a pool pod (a second one
gets 409). Exec goes over the `pods/exec` websocket (channel protocol v4): stdin carries
the call's proxy URL and arguments, stdout is read up to a bound (the rest drained), and
the final Status on the error channel carries the exit code.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any

import aiohttp
from kubernetes_asyncio import client, watch
from kubernetes_asyncio.stream import WsApiClient

from tooladapter.kube.client import Kube
from tooladapter.kube.errors import (
    AlreadyExists,
    Conflict,
    KubeError,
    NotFound,
    api_errors,
    unless_absent,
)
from tooladapter.sandbox.warm import exit_code_of, pod_ended, pod_ready

STDIN, STDOUT, STDERR, ERROR = 0, 1, 2, 3
#: The run script's own report on stderr is small; more is the tool's noise, not kept.
MAX_STDERR_BYTES = 4096


@dataclass(frozen=True)
class ExecResult:
    stdout: bytes
    #: The last `MAX_STDERR_BYTES` of stderr: the script's report at its end.
    stderr: bytes
    #: The exit code the final Status reported; None: none was reported.
    exit_code: int | None
    status: dict[str, Any]
    #: The first `MAX_STDERR_BYTES` of stderr (None: all of it is in `stderr`): what the
    #: script wrote before the tool started (the marks of a call that never started, or
    #: that it started) stays here however much the tool writes after.
    stderr_head: bytes | None = None

    @property
    def head(self) -> bytes:
        return self.stderr if self.stderr_head is None else self.stderr_head


class WarmKube:
    """The calls `executors.warm` makes, over the operator's client and a websocket one."""

    def __init__(self, kube: Kube) -> None:
        self.kube = kube
        self._ws: WsApiClient | None = None

    def _ws_client(self) -> WsApiClient:
        if self._ws is None:
            self._ws = WsApiClient(configuration=self.kube.api.configuration)
        return self._ws

    async def close(self) -> None:
        if self._ws is not None:
            await self._ws.close()
            self._ws = None

    def _plain(self, obj: Any) -> dict[str, Any]:
        return dict(self.kube.api.sanitize_for_serialization(obj))

    async def ensure_policy(self, policy: dict[str, Any]) -> None:
        """Create the namespace's warm NetworkPolicy, or replace its spec when it differs."""
        meta = policy["metadata"]
        api = self.kube.networking
        try:
            with api_errors(creating=True):
                await api.create_namespaced_network_policy(meta["namespace"], policy)
            return
        except (AlreadyExists, Conflict):
            pass
        with api_errors():
            found = self._plain(
                await api.read_namespaced_network_policy(meta["name"], meta["namespace"])
            )
            if found.get("spec") != policy["spec"]:
                await api.patch_namespaced_network_policy(
                    meta["name"], meta["namespace"], {"spec": policy["spec"]}
                )

    async def create_pod(self, pod: dict[str, Any]) -> dict[str, Any]:
        with api_errors(creating=True):
            made = await self.kube.core.create_namespaced_pod(pod["metadata"]["namespace"], pod)
        return self._plain(made)

    async def get_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        found = await unless_absent(self.kube.core.read_namespaced_pod(name, namespace))
        return None if found is None else self._plain(found)

    async def list_pods(self, namespace: str | None, selector: str) -> list[dict[str, Any]]:
        with api_errors():
            if namespace is None:
                res = await self.kube.core.list_pod_for_all_namespaces(label_selector=selector)
            else:
                res = await self.kube.core.list_namespaced_pod(namespace, label_selector=selector)
        return [self._plain(p) for p in res.items]

    async def patch_pod(
        self, pod: dict[str, Any], patch: dict[str, Any], *, exclusive: bool = False
    ) -> dict[str, Any]:
        """Merge-patch `pod`'s metadata; `exclusive`: only the version seen (else `Conflict`)."""
        meta = pod["metadata"]
        body = {"metadata": dict(patch.get("metadata") or {})}
        if exclusive:
            body["metadata"]["resourceVersion"] = meta["resourceVersion"]
        with api_errors():
            done = await self.kube.core.patch_namespaced_pod(meta["name"], meta["namespace"], body)
        return self._plain(done)

    async def delete_pod(
        self, namespace: str, name: str, *, resource_version: str | None = None
    ) -> bool:
        """Delete a pod at once; `resource_version`: only as it was read (a pool pod a call
        claimed meanwhile has another version and is kept). False: gone, or changed."""
        body = (
            {"preconditions": {"resourceVersion": resource_version}, "gracePeriodSeconds": 0}
            if resource_version
            else None
        )
        try:
            with api_errors():
                if body is None:
                    await self.kube.core.delete_namespaced_pod(
                        name, namespace, grace_period_seconds=0
                    )
                else:
                    await self.kube.core.delete_namespaced_pod(name, namespace, body=body)
        except NotFound:
            return False
        except Conflict:
            return False
        return True

    async def list_quotas(self, namespace: str) -> list[dict[str, Any]]:
        """The status (`hard`, `used`) of each ResourceQuota of the namespace."""
        with api_errors():
            res = await self.kube.core.list_namespaced_resource_quota(namespace)
        return [dict(self._plain(q).get("status") or {}) for q in res.items]

    async def wait_ready(self, namespace: str, name: str, *, timeout: float) -> dict[str, Any]:
        """Wait until the pod is Ready (past its network gate); raises TimeoutError, or
        RuntimeError when it ended (or went) first."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            pod = await self.get_pod(namespace, name)
            if pod_ready(pod):
                assert pod is not None
                return pod
            if pod is None or pod_ended(pod):
                raise RuntimeError(f"warm pod {namespace}/{name} ended before it was ready")
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise TimeoutError(f"warm pod {namespace}/{name} not ready in {timeout:.0f}s")
            w = watch.Watch()
            try:
                async with asyncio.timeout(min(remaining, 30)):
                    with api_errors():
                        async for event in w.stream(
                            self.kube.core.list_namespaced_pod,
                            namespace,
                            field_selector=f"metadata.name={name}",
                            resource_version=pod["metadata"]["resourceVersion"],
                            timeout_seconds=int(min(remaining, 30)) + 1,
                        ):
                            obj = self._plain(event["object"])
                            if event["type"] == "DELETED" or pod_ended(obj) or pod_ready(obj):
                                break
            except (TimeoutError, KubeError):
                pass
            finally:
                w.stop()

    async def exec(
        self,
        namespace: str,
        name: str,
        command: list[str],
        *,
        stdin: bytes,
        max_bytes: int,
        container: str = "tool",
    ) -> ExecResult:
        """Run `command` in the pod, feed `stdin`, read stdout (the first `max_bytes`, the
        rest drained) until the process ends. Raises on a lost connection (the caller
        cannot know whether the command ran)."""
        api = client.CoreV1Api(api_client=self._ws_client())
        with api_errors():
            connect = await api.connect_get_namespaced_pod_exec(
                name,
                namespace,
                command=command,
                container=container,
                stdin=True,
                stdout=True,
                stderr=True,
                tty=False,
                _preload_content=False,
            )
        stdout = bytearray()
        stderr = bytearray()
        head = bytearray()
        status: dict[str, Any] = {}
        async with connect as ws:
            if stdin:
                await ws.send_bytes(bytes([STDIN]) + stdin)
            async for msg in ws:
                if msg.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED):
                    break
                if msg.type == aiohttp.WSMsgType.ERROR:
                    raise ConnectionError(f"exec in {namespace}/{name}: {ws.exception()}")
                data = msg.data if isinstance(msg.data, bytes) else str(msg.data).encode()
                if not data:
                    continue
                channel, payload = data[0], data[1:]
                if channel == STDOUT:
                    room = max_bytes - len(stdout)
                    if room > 0:
                        stdout += payload[:room]
                elif channel == STDERR:
                    room = MAX_STDERR_BYTES - len(head)
                    if room > 0:
                        head += payload[:room]
                    # Keep the end too: the script's report is its last line.
                    stderr = (stderr + payload)[-MAX_STDERR_BYTES:]
                elif channel == ERROR and payload:
                    try:
                        status = json.loads(payload)
                    except ValueError:
                        status = {"status": "Failure", "message": payload.decode(errors="replace")}
        if not status:
            raise ConnectionError(f"exec in {namespace}/{name} ended without a status")
        return ExecResult(
            bytes(stdout), bytes(stderr), exit_code_of(status), status, stderr_head=bytes(head)
        )


__all__ = ["Conflict", "ExecResult", "WarmKube"]
