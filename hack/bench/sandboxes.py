"""`python -m bench sandboxes` (issues 29, 41): the sandbox table, one run, on the local cluster.

Rows (shell tools running `echo`, the same limits; the operator with no warm-pool settings
at all, so pools are sized from demand as shipped):

- first call: a new namespace, a descriptor made active, 10 s of nothing, then one call
  (`BENCH_FIRST_CALLS` namespaces, one call each);
- bare pod: the floor, a pod of the same image created directly (no gate, no policy, no
  operator), from its create to its `Succeeded` phase;
- cold Job: a Job of the call's own (the tool names a CIDR egress entry, which keeps a
  call out of warm pods; the entry is TEST-NET and never used);
- pool: a call-workspace tool; nothing waits for a ready pod: what demand sizing gives;
- attempt: calls of one attempt after its first (the workspace pod is there);
- gvisor: a `GVisor` tool (RuntimeClass gvisor, its own pool), when the cluster has it;
- credentialed: a tool carrying a Secret's value as a header, injected by the egress proxy
  into its `wget` of an API on the node's address (a pool pod, as the pool row; its own
  profile, so its own pool).

Each row sequential (`BENCH_SANDBOX_CALLS`, default 20, one call after another) and with
5 agents at once (4 calls each); p50/p95 of create-to-terminal: from just before the POST to
the moment a watch sees the terminal state. A warm row's call that ran cold is counted.
Each row starts once no pod of the bench's namespaces is starting or stopping (at most
60 s; the wait is reported). The machine's load average is read before and after; what
idle warm pods held at the end is read off the operator's metrics.

Runs its own operator and egress proxy (the repo's code, `make run`'s way) on namespaces of
its own; writes BENCH_REPORT (default bench-sandboxes.json).
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import statistics
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import client, watch

from tooladapter.devtools import (
    EgressProxyProcess,
    Namespace,
    OperatorProcess,
    admin_client,
    client_with_token,
    free_port,
    node_ip,
    sa_user,
    token_for,
    wait_for,
)

from .procfs import proc_cpu_seconds
from .setup import helper

GROUP, VERSION = "tooladapter.dev", "v1alpha1"
PREFIX = "tabench-sbx"
TERMINAL = {"Observed", "Failed", "Uncertain", "Denied", "Cancelled"}
SEQUENTIAL = int(os.environ.get("BENCH_SANDBOX_CALLS", "20"))
PARALLEL = 5
PER_AGENT = 4
FIRST_CALLS = int(os.environ.get("BENCH_FIRST_CALLS", "3"))
#: How long after a descriptor became active the first call of a new namespace is made.
FIRST_CALL_AFTER_SECONDS = 10.0
#: The rows to measure (comma-separated labels, e.g. "bare pod,cold Job"); empty: all.
ROWS = {r.strip() for r in os.environ.get("BENCH_SANDBOX_ROWS", "").split(",") if r.strip()}
SANDBOX_IMAGE = os.environ.get("TOOLADAPTER_SANDBOX_IMAGE", "localhost/tooladapter-sandbox:dev")
#: The credentialed row's API: a test name the egress proxy maps to the node's address.
API_HOST = "api.bench.test"


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


#: How long a timed call or bare pod may take to end.
WAIT_SECONDS = 180
#: How long a row waits for the pods the row before it started or deleted (`settle`).
SETTLE_SECONDS = 60.0


def watched(lister: Callable[..., Any], name: str, version: str, *args: Any) -> Iterator[Any]:
    """The object `name` as it changes after `version` (its create's): a watch, so that
    five agents waiting put no load of their own on the API server, and each change is
    seen as it lands (a poll every 20 ms, before 2026-12-07, sent up to 250 reads a
    second and saw a change 10 ms late on average)."""
    stream = watch.Watch()
    try:
        for event in stream.stream(
            lister,
            *args,
            field_selector=f"metadata.name={name}",
            resource_version=version,
            timeout_seconds=WAIT_SECONDS,
        ):
            yield event["object"]
    finally:
        stream.stop()


@dataclass
class Tenant:
    """A namespace of the bench with its agent (a ServiceAccount token) allowed the tools."""

    ns: Namespace
    agent: client.ApiClient
    user: str


class SandboxBench:
    def __init__(self) -> None:
        self.admin = admin_client()
        self.custom = client.CustomObjectsApi(self.admin)
        self.core = client.CoreV1Api(self.admin)
        self.workdir = Path(tempfile.mkdtemp(prefix="bench-sandboxes-"))
        self.report: dict[str, Any] = {"columns": {}, "unavailable": {}, "cold_fallbacks": {}}
        self.proxy: EgressProxyProcess | None = None
        self.operator: OperatorProcess | None = None
        self.api_server: subprocess.Popen[bytes] | None = None
        self.api_port = free_port("0.0.0.0")
        self.tenants: list[Tenant] = []

    # ------------------------------------------------------------------ set-up

    def start(self) -> None:
        scope = {"TOOLADAPTER_NAMESPACES": f"{PREFIX}-*"}
        with (self.workdir / "api-server.log").open("ab") as log:
            self.api_server = helper("http-server", node_ip(), str(self.api_port), log=log)
        self.proxy = EgressProxyProcess(
            self.workdir / "proxy", {**scope, "TOOLADAPTER_EGRESS_HOSTS": f"{API_HOST}={node_ip()}"}
        )
        (self.workdir / "proxy").mkdir()
        self.proxy.start()
        (self.workdir / "operator").mkdir()
        # No warm-pool setting: pools as shipped (sized from demand).
        self.operator = OperatorProcess(
            self.workdir / "operator",
            {
                **scope,
                "TOOLADAPTER_EGRESS_PROXY_PORT": str(self.proxy.port),
                "TOOLADAPTER_EGRESS_PROXY_ADDRESS": node_ip(),
                "TOOLADAPTER_WORKSPACE_SIZE": "256Mi",
            },
        )
        self.operator.env.pop("TOOLADAPTER_WARM_POOL_SIZE", None)
        self.operator.start()

    def credentialed_tool(self, tenant: Tenant) -> str:
        """The credentialed row's tool: a Secret's value as `Authorization: Bearer` on the
        requests to the API, which the egress proxy adds; returns the call's command."""
        target = f"{API_HOST}:{self.api_port}"
        self.core.create_namespaced_secret(
            tenant.ns.name,
            {"metadata": {"name": "bench-api"}, "stringData": {"token": "bench-token-value"}},  # type: ignore[arg-type]  # the client sends a dict body as is
        )
        self.tool(
            tenant,
            "credentialed",
            shell_allow=["wget"],
            credentials=[
                {
                    "name": "api",
                    "source": {"secretKeyRef": {"name": "bench-api", "key": "token"}},
                    "inject": {"hosts": [target]},
                }
            ],
            egress={"allow": [target]},
        )
        return f"wget -q -O - http://{target}/bench"

    def tenant(self) -> Tenant:
        ns = Namespace(self.admin, prefix=PREFIX)
        token = token_for(self.admin, ns.name, "bench-agent")
        tenant = Tenant(ns, client_with_token(self.admin, token), sa_user(ns.name, "bench-agent"))
        self.tenants.append(tenant)
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
                rbac.create_namespaced_role(ns.name, {"metadata": {"name": name}, "rules": rules})
            role = "tooladapter-requester" if kind == "ClusterRole" else name
            rbac.create_namespaced_role_binding(
                ns.name,
                {
                    "metadata": {"name": name},
                    "roleRef": {
                        "apiGroup": "rbac.authorization.k8s.io",
                        "kind": kind,
                        "name": role,
                    },
                    "subjects": [
                        {"kind": "ServiceAccount", "name": "bench-agent", "namespace": ns.name}
                    ],
                },
            )
        return tenant

    def tool(
        self,
        tenant: Tenant,
        tool_id: str,
        *,
        shell_allow: list[str] | None = None,
        credentials: list[dict[str, Any]] | None = None,
        **sandbox: Any,
    ) -> None:
        namespace = tenant.ns.name
        body: dict[str, Any] = {
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
                "shell": {"allow": shell_allow or ["echo", "uname"]},
                "sandbox": {
                    "resources": {
                        "requests": {"cpu": "10m", "memory": "16Mi"},
                        "limits": {"cpu": "250m", "memory": "64Mi"},
                    },
                    **sandbox,
                },
            },
        }
        if credentials:
            body["spec"]["credentials"] = credentials
        self.custom.create_namespaced_custom_object(
            GROUP, VERSION, namespace, "tooldescriptors", body
        )
        wait_for(
            lambda: (
                self.custom.get_namespaced_custom_object(
                    GROUP, VERSION, namespace, "tooldescriptors", f"{tool_id}-1-0-0"
                ).get("status")
                or {}
            ).get("active"),
            timeout=90,
            interval=0.05,
            what=f"descriptor {tool_id} active",
        )

    # ------------------------------------------------------------------ one call

    def call(
        self,
        tenant: Tenant,
        tool: str,
        *,
        attempt: str | None = None,
        command: str = "echo bench",
    ) -> tuple[float, dict[str, Any]]:
        api = client.CustomObjectsApi(tenant.agent)
        namespace = tenant.ns.name
        name = f"{tool}-{os.urandom(5).hex()}"
        spec: dict[str, Any] = {
            "tool": {"id": tool, "version": "1.0.0"},
            "arguments": {"command": command},
            "caller": {"kind": "agent", "name": tenant.user},
        }
        if attempt:
            spec["attemptId"] = attempt
        body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "ToolInvocation"}
        body |= {"metadata": {"name": name}, "spec": spec}
        began = time.monotonic()
        made = api.create_namespaced_custom_object(
            GROUP, VERSION, namespace, "toolinvocations", body
        )
        for obj in watched(
            api.list_namespaced_custom_object,
            name,
            made["metadata"]["resourceVersion"],
            GROUP,
            VERSION,
            namespace,
            "toolinvocations",
        ):
            status = obj.get("status") or {}
            if status.get("state") in TERMINAL:
                return time.monotonic() - began, status
        raise TimeoutError(f"{name} not terminal in {WAIT_SECONDS} s")

    def bare_pod(self, tenant: Tenant) -> tuple[float, dict[str, Any]]:
        """The floor: a pod of the sandbox image running the same `echo`, created directly,
        from its create to its `Succeeded` phase (then deleted, untimed)."""
        namespace = tenant.ns.name
        name = f"bare-{os.urandom(5).hex()}"
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name},
            "spec": {
                "restartPolicy": "Never",
                "automountServiceAccountToken": False,
                "securityContext": {
                    "runAsNonRoot": True,
                    "runAsUser": 65532,
                    "seccompProfile": {"type": "RuntimeDefault"},
                },
                "containers": [
                    {
                        "name": "tool",
                        "image": SANDBOX_IMAGE,
                        "imagePullPolicy": "IfNotPresent",
                        "command": ["echo", "bench"],
                        "resources": {
                            "requests": {"cpu": "10m", "memory": "16Mi"},
                            "limits": {"cpu": "250m", "memory": "64Mi"},
                        },
                        "securityContext": {
                            "allowPrivilegeEscalation": False,
                            "readOnlyRootFilesystem": True,
                            "capabilities": {"drop": ["ALL"]},
                        },
                    }
                ],
            },
        }
        began = time.monotonic()
        made = self.core.create_namespaced_pod(namespace, pod)
        try:
            for obj in watched(
                self.core.list_namespaced_pod,
                name,
                made.metadata.resource_version,
                namespace,
            ):
                phase = obj.status.phase
                if phase in ("Succeeded", "Failed"):
                    return time.monotonic() - began, {
                        "state": "Observed" if phase == "Succeeded" else "Failed",
                        "message": phase,
                    }
            raise TimeoutError(f"bare pod {name} not done in {WAIT_SECONDS} s")
        finally:
            self.core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)

    # ------------------------------------------------------------------ rows

    def column(
        self,
        label: str,
        run: Callable[[int, int], tuple[float, dict[str, Any]]],
        *,
        warm: bool,
    ) -> None:
        """Sequential: SEQUENTIAL calls one after another; parallel: PARALLEL agents at once,
        PER_AGENT calls each. `run(agent, call)` makes one timed call."""
        if ROWS and label not in ROWS:
            return
        self.report.setdefault("settled_seconds", {})[label] = round(self.settle(), 2)
        results: dict[str, Any] = {}
        fallbacks = 0
        assert self.operator is not None and self.operator.proc is not None
        operator_pid = self.operator.proc.pid
        for mode, streams, calls in (
            ("sequential", 1, SEQUENTIAL),
            ("parallel", PARALLEL, PER_AGENT),
        ):
            done: list[tuple[float, dict[str, Any]]] = []
            cpu0 = proc_cpu_seconds(operator_pid)

            def stream(index: int, calls: int = calls) -> list[tuple[float, dict[str, Any]]]:
                return [run(index, r) for r in range(calls)]

            with concurrent.futures.ThreadPoolExecutor(streams) as pool:
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
            results[mode] = summary(times)
            # Each call's time in the order made (sequential) or finished (parallel): which
            # calls of a row were slow, not only how many.
            results[mode]["times"] = [round(t, 3) for t in times]
            if label != "bare pod":
                # The operator's CPU over the row (its calls and its upkeep meanwhile: pools,
                # reaping) per 1,000 calls, beside part 1's read calls (`cpu s/1k`).
                cpu = proc_cpu_seconds(operator_pid) - cpu0
                results[mode]["operator_cpu_s_per_1000"] = round(1000 * cpu / max(1, len(done)), 1)
            if failures:
                results[mode]["failures"] = failures[:5]
            print(f"{label:>14} {mode:>10}: {results[mode]}", flush=True)
        self.report["columns"][label] = results
        if warm:
            self.report["cold_fallbacks"][label] = fallbacks

    def settle(self) -> float:
        """Wait (at most `SETTLE_SECONDS`) until no pod of the bench's namespaces is
        starting or stopping: each row is timed on its own, not during the pod starts and
        deletions the row before it left (a gVisor pool refilling after its burst). How
        long it waited."""
        began = time.monotonic()
        while time.monotonic() - began < SETTLE_SECONDS:
            busy = [
                pod.metadata.name
                for tenant in self.tenants
                for pod in self.core.list_namespaced_pod(tenant.ns.name).items
                if pod.metadata.deletion_timestamp
                or (
                    pod.status.phase not in ("Succeeded", "Failed")
                    and not any(
                        c.type == "Ready" and c.status == "True"
                        for c in pod.status.conditions or []
                    )
                )
            ]
            if not busy:
                break
            time.sleep(0.5)
        return time.monotonic() - began

    def first_calls(self) -> None:
        """A new namespace, its descriptor made active, 10 s, one call: FIRST_CALLS times."""
        if ROWS and "first call" not in ROWS:
            return
        times: list[float] = []
        failures: list[str] = []
        fallbacks = 0
        for _ in range(FIRST_CALLS):
            tenant = self.tenant()
            self.tool(tenant, "first", egress={"allow": []})
            time.sleep(FIRST_CALL_AFTER_SECONDS)
            seconds, status = self.call(tenant, "first")
            if status.get("state") != "Observed":
                failures.append(f"{status.get('state')}: {status.get('message')}")
                continue
            times.append(seconds)
            if (status.get("sandboxLease") or {}).get("start") != "warm":
                fallbacks += 1
            # Its pool would hold a pod for the idle time: gone with its namespace.
            tenant.ns.delete()
            self.tenants.remove(tenant)
        row = {"first": summary(times)}
        if failures:
            row["first"]["failures"] = failures[:5]
        print(f"{'first call':>14} {'10s after':>10}: {row['first']}", flush=True)
        self.report["columns"]["first call"] = row
        self.report["cold_fallbacks"]["first call"] = fallbacks

    def idle_cost(self) -> None:
        """What idle warm pods held at the end, off the operator's metrics."""
        assert self.operator is not None
        url = f"http://127.0.0.1:{self.operator.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as answer:
            text = answer.read().decode()
        cost: dict[str, float] = {}
        for line in text.splitlines():
            if line.startswith("tooladapter_warm_idle_"):
                key, _, value = line.rpartition(" ")
                cost[key] = float(value)
        self.report["idle_warm_cost"] = cost

    def run(self) -> None:
        self.report["started"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        self.report["machine"] = {"cpus": os.cpu_count(), "loadavg": list(os.getloadavg())}
        self.start()
        self.first_calls()
        # The 5 agents are 5 streams of one agent in one namespace (one pool per profile).
        main = self.tenant()
        agents = [main] * PARALLEL
        self.tool(main, "cold", egress={"allow": ["192.0.2.99/32"]})
        self.tool(main, "warm", egress={"allow": []})
        self.tool(main, "attempt", workspace="attempt", egress={"allow": []})
        gvisor = subprocess.run(
            ["kubectl", "get", "runtimeclass", "gvisor"], capture_output=True, text=True
        )

        def by_agent(tool: str) -> Callable[[int, int], tuple[float, dict[str, Any]]]:
            return lambda index, _round: self.call(agents[index], tool)

        self.column("bare pod", lambda index, _r: self.bare_pod(agents[index]), warm=False)
        self.column("cold Job", by_agent("cold"), warm=False)
        self.column("pool", by_agent("warm"), warm=True)
        tag = os.urandom(3).hex()
        for index, tenant in enumerate(agents if not ROWS or "attempt" in ROWS else []):
            self.call(tenant, "attempt", attempt=f"a-{tag}-{index}")  # untimed: it exists
        self.column(
            "attempt",
            lambda index, _r: self.call(agents[index], "attempt", attempt=f"a-{tag}-{index}"),
            warm=True,
        )
        if not ROWS or "credentialed" in ROWS:
            command = self.credentialed_tool(main)

            def credentialed(index: int, _round: int) -> tuple[float, dict[str, Any]]:
                seconds, status = self.call(agents[index], "credentialed", command=command)
                if status.get("state") == "Observed" and not status.get("credentials"):
                    # Counted as a failure: the row times calls that carried it.
                    status = {**status, "state": "Failed", "message": "no credential carried"}
                return seconds, status

            self.column("credentialed", credentialed, warm=True)
        # Last: a gVisor pool's pods each serve one call (their IPC tables cannot be read,
        # so none is handed back), and tearing down their sandboxes costs the node for
        # seconds after the row: the row after it lost 0.5-2 s at p95 (2026-12-07).
        if ROWS and "gvisor" not in ROWS:
            pass
        elif gvisor.returncode == 0:
            self.tool(main, "gvisor", kind="GVisor", egress={"allow": []})
            self.column("gvisor", by_agent("gvisor"), warm=True)
        else:
            self.report["unavailable"]["gvisor"] = (gvisor.stderr or gvisor.stdout).strip()
        self.idle_cost()
        self.report["machine"]["loadavg_after"] = list(os.getloadavg())

    def stop(self) -> None:
        for tenant in self.tenants:
            tenant.ns.delete()
        for proc in (self.operator, self.proxy):
            if proc is not None:
                proc.stop()
        if self.api_server is not None:
            self.api_server.terminate()
            self.api_server.wait(timeout=10)


def print_table(report: dict[str, Any]) -> None:
    print("\nsandboxed calls, create to terminal (seconds)")
    machine = report.get("machine") or {}
    print(
        f"machine: {machine.get('cpus')} cpus, load average before {machine.get('loadavg')}, "
        f"after {machine.get('loadavg_after')}"
    )
    print(
        f"{'':>14} {'seq p50':>8} {'seq p95':>8} {'5x4 p50':>8} {'5x4 p95':>8}  ran cold"
        "  operator CPU s/1000 calls (seq, 5x4)"
    )
    for label, modes in report["columns"].items():
        if "first" in modes:
            first = modes["first"]
            print(
                f"{label:>14} {first.get('p50')!s:>8} {first.get('p95')!s:>8} "
                f"{'':>8} {'':>8}  {report['cold_fallbacks'].get(label, '')}"
                f"  (n={first.get('n')}, 10 s after activation)"
            )
            continue
        seq, par = modes.get("sequential", {}), modes.get("parallel", {})
        fallbacks = report["cold_fallbacks"].get(label, "")
        cpu = (seq.get("operator_cpu_s_per_1000"), par.get("operator_cpu_s_per_1000"))
        print(
            f"{label:>14} {seq.get('p50')!s:>8} {seq.get('p95')!s:>8} "
            f"{par.get('p50')!s:>8} {par.get('p95')!s:>8}  {fallbacks!s:>8}"
            + (f"  {cpu[0]}, {cpu[1]}" if cpu[0] is not None else "")
        )
    for label, why in report["unavailable"].items():
        print(f"{label:>14} unavailable: {why}")
    for key, value in (report.get("idle_warm_cost") or {}).items():
        print(f"idle warm cost: {key} = {value}")


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
