"""`python -m bench sandboxes` (issue 29): sandboxed calls cold, warm and in an attempt's
workspace, side by side in one run, on the local cluster.

Columns (one shell tool each, `echo`, the same limits):

- cold: a Job of the call's own (the tool names a CIDR egress entry, which keeps a call out
  of warm pods; the entry is TEST-NET and never used);
- warm pool: a call-workspace tool while the pool (TOOLADAPTER_WARM_POOL_SIZE) has a ready
  pod: the bench waits, untimed, until one is ready before each call;
- attempt: calls of one attempt after its first (the workspace pod is there);
- attempt first: the first call of an attempt while the attempt tool's pool has a ready pod;
- gvisor: cold calls of a `GVisor` tool (RuntimeClass gvisor), and later calls of an attempt
  of a `GVisor` attempt tool ("gvisor attempt"), when the cluster has the RuntimeClass.

Each column sequential (one call after another) and with 5 attempts (streams) in parallel;
p50/p95 of create-to-terminal: from just before the POST to the moment a poll (every 20 ms)
sees the terminal state. A call meant to be warm that ran cold is counted and reported.

Runs its own operator and egress proxy (the repo's code, `make run`'s way) on a namespace
of its own; writes BENCH_REPORT (default bench-sandboxes.json).
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from kubernetes import client

from tooladapter.devtools import (
    EgressProxyProcess,
    Namespace,
    OperatorProcess,
    admin_client,
    client_with_token,
    node_ip,
    sa_user,
    token_for,
    wait_for,
)

GROUP, VERSION = "tooladapter.dev", "v1alpha1"
PREFIX = "tabench-sbx"
TERMINAL = {"Observed", "Failed", "Uncertain", "Denied", "Cancelled"}
SEQUENTIAL = int(os.environ.get("BENCH_SANDBOX_CALLS", "10"))
PARALLEL = 5
POOL = PARALLEL


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    k = max(0, min(len(ordered) - 1, round(q * (len(ordered) - 1))))
    return round(ordered[k], 3)


def summary(values: list[float]) -> dict[str, Any]:
    return {
        "n": len(values),
        "p50": _pct(values, 0.5),
        "p95": _pct(values, 0.95),
        "mean": round(statistics.fmean(values), 3) if values else None,
    }


class SandboxBench:
    def __init__(self) -> None:
        self.admin = admin_client()
        self.custom = client.CustomObjectsApi(self.admin)
        self.core = client.CoreV1Api(self.admin)
        self.workdir = Path(tempfile.mkdtemp(prefix="bench-sandboxes-"))
        self.report: dict[str, Any] = {"columns": {}, "unavailable": {}, "cold_fallbacks": {}}
        self.proxy: EgressProxyProcess | None = None
        self.operator: OperatorProcess | None = None
        self.ns: Namespace | None = None
        self.agent: client.ApiClient | None = None
        self.user = ""

    # ------------------------------------------------------------------ set-up

    def start(self) -> None:
        scope = {"TOOLADAPTER_NAMESPACES": f"{PREFIX}-*"}
        self.proxy = EgressProxyProcess(self.workdir / "proxy", scope)
        (self.workdir / "proxy").mkdir()
        self.proxy.start()
        (self.workdir / "operator").mkdir()
        self.operator = OperatorProcess(
            self.workdir / "operator",
            {
                **scope,
                "TOOLADAPTER_EGRESS_PROXY_PORT": str(self.proxy.port),
                "TOOLADAPTER_EGRESS_PROXY_ADDRESS": node_ip(),
                "TOOLADAPTER_WARM_POOL_SIZE": str(POOL),
                "TOOLADAPTER_WORKSPACE_SIZE": "256Mi",
                # The attempt-first columns make a workspace per call.
                "TOOLADAPTER_WORKSPACES_PER_NAMESPACE": "1000",
                "TOOLADAPTER_RECONCILE_INTERVAL_SECONDS": "5",
            },
        )
        self.operator.start()
        self.ns = Namespace(self.admin, prefix=PREFIX)
        token = token_for(self.admin, self.ns.name, "bench-agent")
        self.agent = client_with_token(self.admin, token)
        self.user = sa_user(self.ns.name, "bench-agent")
        rbac = client.RbacAuthorizationV1Api(self.admin)
        for name, kind, rules in (
            ("bench-requester", "ClusterRole", None),
            (
                "bench-tools",
                "Role",
                [
                    {"apiGroups": [GROUP], "resources": ["tooldescriptors"], "verbs": ["invoke"]},
                    {
                        "apiGroups": [GROUP],
                        "resources": ["sideeffectclasses"],
                        "verbs": ["use"],
                        "resourceNames": ["sandbox"],
                    },
                ],
            ),
        ):
            if rules is not None:
                rbac.create_namespaced_role(
                    self.ns.name, {"metadata": {"name": name}, "rules": rules}
                )
            role = "tooladapter-requester" if kind == "ClusterRole" else name
            rbac.create_namespaced_role_binding(
                self.ns.name,
                {
                    "metadata": {"name": name},
                    "roleRef": {
                        "apiGroup": "rbac.authorization.k8s.io",
                        "kind": kind,
                        "name": role,
                    },
                    "subjects": [
                        {"kind": "ServiceAccount", "name": "bench-agent", "namespace": self.ns.name}
                    ],
                },
            )

    def tool(self, tool_id: str, **sandbox: Any) -> None:
        assert self.ns is not None
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "ToolDescriptor",
            "metadata": {"name": f"{tool_id}-1-0-0"},
            "spec": {
                "toolId": tool_id,
                "version": "1.0.0",
                "kind": "shell",
                "sideEffectClass": "sandbox",
                "inputSchema": {
                    "type": "object",
                    "properties": {"command": {"type": "string"}},
                    "required": ["command"],
                },
                "timeoutSeconds": 60,
                "shell": {"allow": ["echo", "uname"]},
                "sandbox": {
                    "resources": {
                        # Small requests: on 2 cores, pools and workspaces of five
                        # streams hold many pods at once.
                        "requests": {"cpu": "10m", "memory": "16Mi"},
                        "limits": {"cpu": "250m", "memory": "64Mi"},
                    },
                    **sandbox,
                },
            },
        }
        self.custom.create_namespaced_custom_object(
            GROUP, VERSION, self.ns.name, "tooldescriptors", body
        )
        wait_for(
            lambda: (
                self.custom.get_namespaced_custom_object(
                    GROUP, VERSION, self.ns.name, "tooldescriptors", f"{tool_id}-1-0-0"
                ).get("status")
                or {}
            ).get("active"),
            timeout=90,
            what=f"descriptor {tool_id} active",
        )

    # ------------------------------------------------------------------ one call

    def call(self, tool: str, *, attempt: str | None = None) -> tuple[float, dict[str, Any]]:
        assert self.ns is not None and self.agent is not None
        api = client.CustomObjectsApi(self.agent)
        name = f"{tool}-{os.urandom(5).hex()}"
        spec: dict[str, Any] = {
            "tool": {"id": tool, "version": "1.0.0"},
            "arguments": {"command": "echo bench"},
            "caller": {"kind": "agent", "name": self.user},
        }
        if attempt:
            spec["attemptId"] = attempt
        body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "ToolInvocation"}
        body |= {"metadata": {"name": name}, "spec": spec}
        began = time.monotonic()
        api.create_namespaced_custom_object(GROUP, VERSION, self.ns.name, "toolinvocations", body)
        deadline = began + 180
        while True:
            obj = api.get_namespaced_custom_object(
                GROUP, VERSION, self.ns.name, "toolinvocations", name
            )
            status = obj.get("status") or {}
            if status.get("state") in TERMINAL:
                return time.monotonic() - began, status
            if time.monotonic() > deadline:
                raise TimeoutError(f"{name} not terminal in 180 s: {status.get('state')}")
            time.sleep(0.02)

    def pool_ready(self, count: int, size: str) -> None:
        """Untimed: wait until the pool of the profile whose workspace is `size` holds
        `count` ready pods (the warm tool's 64Mi, the attempt tool's 256Mi)."""
        assert self.ns is not None

        def ready() -> bool:
            pods = self.core.list_namespaced_pod(
                self.ns.name, label_selector="tooladapter.dev/warm-state=pool"
            ).items
            return (
                sum(
                    1
                    for p in pods
                    if p.status.phase == "Running"
                    and p.metadata.deletion_timestamp is None
                    and any(
                        v.empty_dir is not None and v.empty_dir.size_limit == size
                        for v in p.spec.volumes or []
                        if v.name == "workspace"
                    )
                    and any(
                        c.type == "Ready" and c.status == "True" for c in p.status.conditions or []
                    )
                )
                >= count
            )

        wait_for(ready, timeout=180, what=f"{count} ready pool pods")

    # ------------------------------------------------------------------ columns

    def column(
        self,
        label: str,
        tool: str,
        *,
        warm: bool,
        attempt: bool = False,
        first_of_attempt: bool = False,
    ) -> None:
        """Sequential: SEQUENTIAL calls one after another. Parallel: PARALLEL streams at
        once; for pool columns in rounds of PARALLEL calls, each round started when the pool
        holds PARALLEL ready pods (untimed), which is what a pool of that size promises."""
        results: dict[str, Any] = {}
        fallbacks = 0
        pooled = warm and (not attempt or first_of_attempt)
        for mode, streams in (("sequential", 1), ("parallel", PARALLEL)):
            calls = SEQUENTIAL if streams == 1 else max(2, SEQUENTIAL // 2)
            attempts = [f"{label}-{mode}-{i}-{os.urandom(3).hex()}" for i in range(streams)]
            if attempt and not first_of_attempt:
                for attempt_id in attempts:
                    self.call(tool, attempt=attempt_id)  # the workspace exists: untimed

            def one(
                index: int, round_: int, attempts: list[str] = attempts
            ) -> tuple[float, dict[str, Any]]:
                attempt_id = attempts[index]
                if first_of_attempt:
                    attempt_id = f"{attempt_id}-{round_}"
                return self.call(tool, attempt=attempt_id if attempt else None)

            done: list[tuple[float, dict[str, Any]]] = []
            with concurrent.futures.ThreadPoolExecutor(streams) as pool:
                if pooled:
                    for round_ in range(calls):
                        self.pool_ready(streams, "256Mi" if attempt else "64Mi")
                        done += pool.map(lambda i, r=round_: one(i, r), range(streams))
                else:

                    def stream(
                        index: int, calls: int = calls
                    ) -> list[tuple[float, dict[str, Any]]]:
                        return [one(index, r) for r in range(calls)]

                    for part in pool.map(stream, range(streams)):
                        done += part
            times: list[float] = []
            failures: list[str] = []
            for seconds, status in done:
                if status.get("state") != "Observed":
                    failures.append(f"{status.get('state')}: {status.get('message')}")
                    continue
                times.append(seconds)
                start = (status.get("sandboxLease") or {}).get("start")
                if warm and start != "warm":
                    fallbacks += 1
            if attempt:
                self.release_workspaces()
            results[mode] = summary(times)
            if failures:
                results[mode]["failures"] = failures[:5]
            print(f"{label:>14} {mode:>10}: {results[mode]}", flush=True)
        self.report["columns"][label] = results
        if warm:
            self.report["cold_fallbacks"][label] = fallbacks

    def release_workspaces(self) -> None:
        """The column's attempts are over: their workspaces go (as a release would)."""
        assert self.ns is not None
        self.core.delete_collection_namespaced_pod(
            self.ns.name, label_selector="tooladapter.dev/warm-state=attempt"
        )

    def run(self) -> None:
        self.report["started"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        self.report["machine"] = {"cpus": os.cpu_count(), "loadavg": list(os.getloadavg())}
        self.start()
        self.tool("cold", egress={"allow": ["192.0.2.99/32"]})
        self.tool("warm", egress={"allow": []})
        self.tool("attempt", workspace="attempt", egress={"allow": []})
        gvisor = subprocess.run(
            ["kubectl", "get", "runtimeclass", "gvisor"], capture_output=True, text=True
        )
        self.column("cold", "cold", warm=False)
        # One call of each warm profile starts its pool; then the pool is measured.
        self.call("warm")
        self.column("warm pool", "warm", warm=True)
        self.call("attempt", attempt="start-the-pool")
        self.column("attempt first", "attempt", warm=True, attempt=True, first_of_attempt=True)
        self.column("attempt", "attempt", warm=True, attempt=True)
        if gvisor.returncode == 0:
            self.tool("gvisor", kind="GVisor", egress={"allow": ["192.0.2.99/32"]})
            self.column("gvisor", "gvisor", warm=False)
            self.tool("gvisor-attempt", kind="GVisor", workspace="attempt", egress={"allow": []})
            self.column("gvisor attempt", "gvisor-attempt", warm=True, attempt=True)
        else:
            self.report["unavailable"]["gvisor"] = (gvisor.stderr or gvisor.stdout).strip()

    def stop(self) -> None:
        if self.ns is not None:
            self.ns.delete()
        for proc in (self.operator, self.proxy):
            if proc is not None:
                proc.stop()


def print_table(report: dict[str, Any]) -> None:
    print("\nsandboxed calls, create to terminal (seconds)")
    print(f"{'':>14} {'seq p50':>8} {'seq p95':>8} {'par p50':>8} {'par p95':>8}  cold fallbacks")
    for label, modes in report["columns"].items():
        seq, par = modes.get("sequential", {}), modes.get("parallel", {})
        fallbacks = report["cold_fallbacks"].get(label, "")
        print(
            f"{label:>14} {seq.get('p50')!s:>8} {seq.get('p95')!s:>8} "
            f"{par.get('p50')!s:>8} {par.get('p95')!s:>8}  {fallbacks}"
        )
    for label, why in report["unavailable"].items():
        print(f"{label:>14} unavailable: {why}")


def main() -> None:
    bench = SandboxBench()
    out = Path(os.environ.get("BENCH_REPORT", "bench-sandboxes.json"))
    try:
        bench.run()
    finally:
        bench.stop()
        bench.report["finished"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        out.write_text(json.dumps(bench.report, indent=2) + "\n")
        print_table(bench.report)
        print(f"report: {out}")
