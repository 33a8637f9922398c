"""`make bench`: what governance costs, measured against the floor in the same run.

Everything runs against the cluster of KUBECONFIG with the operator started exactly as
`make run` starts it (`python -m tooladapter run`, its own process), sharded to the bench's
namespaces with TOOLADAPTER_NAMESPACES so it never touches anyone else's objects.

Parts (BENCH_PARTS, default all):

1. calls: non-sandboxed calls (native `read-configmap`, an `http` tool against a server on
   the node's address; `list-tools` on request) at sustained, open-loop offered loads by
   many agent clients (real ServiceAccount tokens), create -> Observed seen on a watch.
2. floor: the same clients doing only what a CR-based call cannot avoid: create a
   `BenchFloor` (a CRD of the bench's own, with a status subresource), one status update by
   a minimal controller (a separate process), the watch event back to the client.
3. sandbox: a trivial shell tool, sequential and concurrent, against a bare Job with the
   same pod spec (create -> Complete, plus reading its log).
4. resources: the operator's CPU seconds per 1000 calls and RSS (from /proc), and RSS with
   BENCH_FILL (10,000) finished invocations stored, also after a restart.
5. stages: where the time goes, from status.stages[].time of (1) and (3).

Knobs (environment or flags): BENCH_SECONDS (60 per load), BENCH_LOADS ("10,25,50,100"),
BENCH_TOOLS ("read-configmap,http"), BENCH_AGENTS (8), BENCH_PARTS ("1,2,3,4,5"),
BENCH_FILL (10000), BENCH_FILL_RATE (100), BENCH_FILL_INFLIGHT (200), BENCH_DRAIN_SECONDS (60),
BENCH_SANDBOX_SEQUENTIAL (10), BENCH_SANDBOX_CONCURRENT (10), BENCH_SANDBOX_ROUNDS (3),
BENCH_REPORT (bench-report.json), BENCH_PYSPY (record the operator with py-spy during the
highest load: .svg flame graph, .json speedscope, else collapsed stacks),
BENCH_OPERATOR_SRC (run the operator from another copy of the package, for A/B runs).
A quick run: `BENCH_SECONDS=10 make bench`.

Traffic goes only to the API server of KUBECONFIG and to the node's own address. The bench
deletes its namespaces and its CRD at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import fnmatch
import json
import os
import shutil
import ssl
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import aiohttp  # noqa: E402
from aiohttp import web  # noqa: E402
from kubernetes import client, config  # noqa: E402
from tests.support import (  # noqa: E402
    OperatorProcess,
    admin_client,
    free_port,
    kubeconfig,
    node_ip,
    sa_user,
    token_for,
    wait_for,
)

GROUP, VERSION = "tooladapter.dev", "v1alpha1"
BENCH_GROUP = "bench.tooladapter.dev"
FLOOR_PLURAL = "benchfloors"
FLOOR_CRD = f"{FLOOR_PLURAL}.{BENCH_GROUP}"
TERMINAL = {"Observed", "Failed", "Uncertain", "Cancelled", "Denied"}
LABEL_PHASE = "bench.tooladapter.dev/phase"
BENCH_JOB_MANAGER = "tooladapter-bench"
CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")

#: What happens between two consecutive marks of the stage log (see handlers/invocations.py).
SEGMENT_NOTES = {
    "sent -> startedAt": "create + admission, watch event to the operator, kopf dispatch",
    "startedAt -> validation:passed": "descriptor lookup, bounds, JSON Schema, request hash",
    "validation:passed -> permission:passed": "policy evaluation, 2 SARs (allowed answers "
    "remembered TOOLADAPTER_AUTHZ_CACHE_SECONDS)",
    "sandbox:leased -> execute:started": "PATCH Executing (before the Job exists)",
    "credentials:none -> sandbox:leased": "NetworkPolicy create",
    "execute:started -> sanitize:done": "the tool itself (a read in the operator: no PATCH "
    "before it); for sandboxes the Job, its pod and the log read",
    "sanitize:done -> execute:observed": "result to the artifact store (fsync, in a thread), "
    "lease release",
    "execute:observed -> audit:receipt": "end time and state set",
    "audit:receipt -> client saw terminal": "receipt built and stored, the one status PATCH, "
    "the watch event back to the client",
    "execute:observed -> client saw terminal": "receipt built and stored, the one status "
    "PATCH, the watch event back to the client",
}


# ---------------------------------------------------------------------------- settings


@dataclass
class Config:
    seconds: float = 60.0
    loads: list[float] = field(default_factory=lambda: [10.0, 25.0, 50.0, 100.0])
    tools: list[str] = field(default_factory=lambda: ["read-configmap", "http"])
    agents: int = 8
    parts: set[str] = field(default_factory=lambda: {"1", "2", "3", "4", "5"})
    fill: int = 10_000
    fill_rate: float = 100.0
    fill_inflight: int = 200
    drain: float = 60.0
    sandbox_sequential: int = 10
    sandbox_concurrent: int = 10
    sandbox_rounds: int = 3
    report: Path = ROOT / "bench-report.json"
    pyspy: str = ""
    operator_src: str = ""
    keep: bool = False

    @classmethod
    def parse(cls, argv: list[str]) -> Config:
        env = os.environ.get
        p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
        p.add_argument("--seconds", type=float, default=float(env("BENCH_SECONDS", "60")))
        p.add_argument("--loads", default=env("BENCH_LOADS", "10,25,50,100"))
        p.add_argument("--tools", default=env("BENCH_TOOLS", "read-configmap,http"))
        p.add_argument("--agents", type=int, default=int(env("BENCH_AGENTS", "8")))
        p.add_argument("--parts", default=env("BENCH_PARTS", "1,2,3,4,5"))
        p.add_argument("--fill", type=int, default=int(env("BENCH_FILL", "10000")))
        p.add_argument("--fill-rate", type=float, default=float(env("BENCH_FILL_RATE", "100")))
        p.add_argument("--fill-inflight", type=int, default=int(env("BENCH_FILL_INFLIGHT", "200")))
        p.add_argument("--drain", type=float, default=float(env("BENCH_DRAIN_SECONDS", "60")))
        p.add_argument(
            "--sandbox-sequential", type=int, default=int(env("BENCH_SANDBOX_SEQUENTIAL", "10"))
        )
        p.add_argument(
            "--sandbox-concurrent", type=int, default=int(env("BENCH_SANDBOX_CONCURRENT", "10"))
        )
        p.add_argument("--sandbox-rounds", type=int, default=int(env("BENCH_SANDBOX_ROUNDS", "3")))
        p.add_argument("--report", default=env("BENCH_REPORT", str(ROOT / "bench-report.json")))
        p.add_argument("--pyspy", default=env("BENCH_PYSPY", ""))
        p.add_argument(
            "--operator-src",
            default=env("BENCH_OPERATOR_SRC", ""),
            help="directory holding another copy of the tooladapter package (A/B runs)",
        )
        p.add_argument("--keep", action="store_true", help="keep namespaces and CRD")
        a = p.parse_args(argv)
        return cls(
            seconds=a.seconds,
            loads=[float(x) for x in a.loads.split(",") if x.strip()],
            tools=[t.strip() for t in a.tools.split(",") if t.strip()],
            agents=a.agents,
            parts={x.strip() for x in a.parts.split(",") if x.strip()},
            fill=a.fill,
            fill_rate=a.fill_rate,
            fill_inflight=a.fill_inflight,
            drain=a.drain,
            sandbox_sequential=a.sandbox_sequential,
            sandbox_concurrent=a.sandbox_concurrent,
            sandbox_rounds=a.sandbox_rounds,
            report=Path(a.report),
            pyspy=a.pyspy,
            operator_src=a.operator_src,
            keep=a.keep,
        )


# ---------------------------------------------------------------------------- API access


@dataclass(frozen=True)
class Endpoint:
    host: str
    ca: str | None
    cert: str | None
    key: str | None
    verify: bool

    @classmethod
    def from_kubeconfig(cls, path: str) -> Endpoint:
        cfg = config.new_client_from_config(config_file=path).configuration
        return cls(cfg.host, cfg.ssl_ca_cert, cfg.cert_file, cfg.key_file, bool(cfg.verify_ssl))

    def ssl_context(self, *, client_cert: bool) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=self.ca)
        if not self.verify:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        if client_cert and self.cert and self.key:
            ctx.load_cert_chain(self.cert, self.key)
        return ctx


class Api:
    """A lean async client: raw JSON over one aiohttp connection pool per identity."""

    def __init__(self, ep: Endpoint, token: str | None = None, limit: int = 64) -> None:
        headers = {"Accept": "application/json"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self.base = ep.host.rstrip("/")
        self.session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=ep.ssl_context(client_cert=not token), limit=limit),
            headers=headers,
            timeout=aiohttp.ClientTimeout(total=60),
        )

    async def close(self) -> None:
        await self.session.close()

    async def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        params: dict[str, str] | None = None,
        content_type: str = "application/json",
        timeout: float | None = None,
    ) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": content_type} if data is not None else None
        async with self.session.request(
            method,
            self.base + path,
            data=data,
            params=params,
            headers=headers,
            timeout=aiohttp.ClientTimeout(total=timeout) if timeout else None,
        ) as resp:
            raw = await resp.read()
        try:
            return resp.status, json.loads(raw) if raw else None
        except ValueError:
            return resp.status, raw.decode(errors="replace")

    async def text(self, path: str, params: dict[str, str] | None = None) -> tuple[int, str]:
        async with self.session.get(self.base + path, params=params) as resp:
            return resp.status, await resp.text()

    async def watch(
        self,
        path: str,
        handle: Callable[[str, dict[str, Any], float], None],
        *,
        params: dict[str, str] | None = None,
        ready: asyncio.Event | None = None,
    ) -> None:
        """Watch `path` forever from the current resourceVersion; `handle(type, obj, t)`."""
        rv: str | None = None
        while True:
            if rv is None:
                status, listing = await self.call(
                    "GET", path, params={"limit": "1", **(params or {})}
                )
                if status != 200:
                    await asyncio.sleep(0.5)
                    continue
                rv = listing["metadata"]["resourceVersion"]
            query = {
                "watch": "1",
                "resourceVersion": rv,
                "allowWatchBookmarks": "true",
                "timeoutSeconds": "290",
                **(params or {}),
            }
            try:
                async with self.session.get(
                    self.base + path,
                    params=query,
                    timeout=aiohttp.ClientTimeout(total=None, sock_connect=30, sock_read=320),
                ) as resp:
                    if resp.status != 200:
                        rv = None
                        await asyncio.sleep(0.5)
                        continue
                    if ready is not None:
                        ready.set()
                    buf = b""
                    async for chunk in resp.content.iter_any():
                        now = time.time()
                        buf += chunk
                        while (i := buf.find(b"\n")) >= 0:
                            line, buf = buf[:i], buf[i + 1 :]
                            if not line.strip():
                                continue
                            event = json.loads(line)
                            kind, obj = event.get("type"), event.get("object") or {}
                            if kind == "ERROR":
                                rv = None  # 410 Gone and friends: list again
                                break
                            rv = obj.get("metadata", {}).get("resourceVersion", rv)
                            if kind != "BOOKMARK":
                                handle(kind, obj, now)
                        if rv is None:
                            break
            except (aiohttp.ClientError, TimeoutError):
                await asyncio.sleep(0.2)


def ns_path(group: str, version: str, namespace: str, plural: str) -> str:
    prefix = "/api/v1" if group == "" else f"/apis/{group}/{version}"
    return f"{prefix}/namespaces/{namespace}/{plural}"


# ---------------------------------------------------------------------------- /proc


def proc_cpu_seconds(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime + stime


def proc_mem_mb(pid: int) -> dict[str, float]:
    out = {"rss_mb": 0.0, "hwm_mb": 0.0}
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                out["rss_mb"] = int(line.split()[1]) / 1024
            elif line.startswith("VmHWM:"):
                out["hwm_mb"] = int(line.split()[1]) / 1024
    except OSError:
        pass
    return out


def host_cpu() -> tuple[float, float]:
    """(busy, total) jiffies of the whole machine."""
    parts = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = parts[3] + parts[4]
    total = sum(parts[:8])
    return total - idle, total


def pids_named(*names: str) -> dict[str, int]:
    found: dict[str, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            comm = (entry / "comm").read_text().strip()
            if comm in names and comm not in found:
                found[comm] = int(entry.name)
    return found


def other_operators(mine: set[int], namespace: str) -> list[str]:
    """Other tooladapter operators whose namespaces include the bench's: they would race.

    Operators sharded with TOOLADAPTER_NAMESPACES to other namespaces are harmless; only
    that one variable of their environment is read.
    """
    others = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) in mine:
            continue
        with contextlib.suppress(OSError):
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            if b"tooladapter" not in argv and b"tooladapter.main" not in argv:
                continue
            if b"run" not in argv:
                continue
            patterns = ["*"]
            for var in (entry / "environ").read_bytes().split(b"\0"):
                if var.startswith(b"TOOLADAPTER_NAMESPACES="):
                    raw = var.split(b"=", 1)[1].decode()
                    patterns = [p.strip() for p in raw.split(",") if p.strip()] or ["*"]
            if any(fnmatch.fnmatch(namespace, p) for p in patterns):
                cmd = b" ".join(argv).decode(errors="replace").strip()
                others.append(f"pid {entry.name} ({cmd[:100]}) watches {patterns}")
    return others


class Meter:
    """CPU and memory of the operator (and friends) over one phase, RSS sampled each second."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.pids = pids
        self.cpu0 = {k: proc_cpu_seconds(p) for k, p in pids.items()}
        self.host0 = host_cpu()
        self.load0 = os.getloadavg()
        self.t0 = time.time()
        self.peak_rss = {k: proc_mem_mb(p)["rss_mb"] for k, p in pids.items()}
        self._task = asyncio.ensure_future(self._sample())

    async def _sample(self) -> None:
        while True:
            await asyncio.sleep(1)
            for k, p in self.pids.items():
                self.peak_rss[k] = max(self.peak_rss[k], proc_mem_mb(p)["rss_mb"])

    def stop(self) -> dict[str, Any]:
        self._task.cancel()
        busy1, total1 = host_cpu()
        busy0, total0 = self.host0
        cpu = {k: round(proc_cpu_seconds(p) - self.cpu0[k], 2) for k, p in self.pids.items()}
        return {
            "wall_s": round(time.time() - self.t0, 1),
            "cpu_s": cpu,
            "rss_mb_end": {k: round(proc_mem_mb(p)["rss_mb"], 1) for k, p in self.pids.items()},
            "rss_mb_peak": {k: round(v, 1) for k, v in self.peak_rss.items()},
            "host_cpu_busy_pct": round(100 * (busy1 - busy0) / max(1, total1 - total0), 1),
            "loadavg_start": [round(x, 2) for x in self.load0],
            "loadavg_end": [round(x, 2) for x in os.getloadavg()],
        }


# ---------------------------------------------------------------------------- statistics


def pct(values: list[float], p: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    k = max(0, min(len(s) - 1, round(p / 100 * len(s) + 0.5) - 1))
    return s[k]


def ms(v: float | None) -> float | None:
    return None if v is None else round(v * 1000, 1)


def latency_summary(values: list[float]) -> dict[str, Any]:
    return {
        "n": len(values),
        "p50_ms": ms(pct(values, 50)),
        "p95_ms": ms(pct(values, 95)),
        "p99_ms": ms(pct(values, 99)),
        "max_ms": ms(max(values) if values else None),
        "mean_ms": ms(sum(values) / len(values) if values else None),
    }


def iso_ts(value: str | None) -> float | None:
    if not value:
        return None
    from datetime import datetime

    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def stage_breakdown(records: list[Call]) -> dict[str, Any]:
    """Mean/p50/p95 of the time between consecutive marks of each Observed call's stage log."""
    segments: dict[str, list[float]] = {}
    order: list[str] = []
    for rec in records:
        if rec.state != "Observed" or not rec.status:
            continue
        st = rec.status
        marks: list[tuple[str, float | None]] = [
            ("sent", rec.target),
            ("startedAt", iso_ts(st.get("startedAt"))),
        ]
        marks += [(f"{s['stage']}:{s['outcome']}", iso_ts(s.get("time"))) for s in st["stages"]]
        marks.append(("client saw terminal", rec.done))
        prev_name, prev_t = marks[0]
        for name, t in marks[1:]:
            if t is None or prev_t is None:
                prev_name, prev_t = name, t
                continue
            key = f"{prev_name} -> {name}"
            if key not in segments:
                segments[key] = []
                order.append(key)
            segments[key].append(t - prev_t)
            prev_name, prev_t = name, t
    rows = []
    for key in order:
        vals = segments[key]
        rows.append(
            {
                "segment": key,
                "n": len(vals),
                "mean_ms": ms(sum(vals) / len(vals)),
                "p50_ms": ms(pct(vals, 50)),
                "p95_ms": ms(pct(vals, 95)),
                "what": SEGMENT_NOTES.get(key, ""),
            }
        )
    slowest = max(rows, key=lambda r: r["mean_ms"] or 0, default=None)
    return {"segments": rows, "slowest": slowest["segment"] if slowest else None}


# ---------------------------------------------------------------------------- one call


@dataclass
class Call:
    name: str
    target: float
    sent: float = 0.0
    created: float = 0.0
    http_status: int = 0
    error: str = ""
    done: float = 0.0
    state: str = ""
    status: dict[str, Any] | None = None
    event: asyncio.Event | None = None


class Tracker:
    """The calls of one phase, completed by a single watch on their resource."""

    def __init__(self, terminal: Callable[[dict[str, Any]], str | None]) -> None:
        self.calls: dict[str, Call] = {}
        self.terminal = terminal
        self.pending = 0
        self.all_done = asyncio.Event()

    def add(self, call: Call) -> None:
        self.calls[call.name] = call
        self.pending += 1
        self.all_done.clear()

    def handle(self, kind: str, obj: dict[str, Any], now: float) -> None:
        if kind == "DELETED":
            return
        rec = self.calls.get(obj["metadata"]["name"])
        if rec is None or rec.done:
            return
        state = self.terminal(obj)
        if state is None:
            return
        rec.done, rec.state = now, state
        st = obj.get("status") or {}
        rec.status = {k: st.get(k) for k in ("startedAt", "endedAt", "stages")}
        if rec.event is not None:
            rec.event.set()
        self.finish_one()

    def fail(self, rec: Call, why: str) -> None:
        rec.error = why
        rec.state = "CreateError"
        self.finish_one()

    def finish_one(self) -> None:
        self.pending -= 1
        if self.pending <= 0:
            self.all_done.set()


def invocation_terminal(obj: dict[str, Any]) -> str | None:
    state = (obj.get("status") or {}).get("state")
    return state if state in TERMINAL else None


def floor_terminal(obj: dict[str, Any]) -> str | None:
    return "Observed" if (obj.get("status") or {}).get("state") == "Observed" else None


# ---------------------------------------------------------------------------- the bench


@dataclass
class AgentClient:
    name: str
    user: str
    api: Api


class Bench:
    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.run_id = uuid.uuid4().hex[:6]
        self.ns = f"bench-{self.run_id}"
        self.admin = admin_client()
        self.ep = Endpoint.from_kubeconfig(kubeconfig())
        self.host = node_ip()
        self.workdir = Path(tempfile.mkdtemp(prefix="tooladapter-bench-"))
        self.procs: list[subprocess.Popen[bytes]] = []
        self.operator: OperatorProcess | None = None
        self.floor_proc: subprocess.Popen[bytes] | None = None
        self.http_port = 0
        self.agents: list[AgentClient] = []
        self.kube: Api | None = None
        self.report: dict[str, Any] = {
            "run_id": self.run_id,
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "config": {
                **{k: v for k, v in asdict(cfg).items() if k not in ("report", "parts")},
                "parts": sorted(cfg.parts),
            },
            "machine": {"cpus": os.cpu_count(), "loadavg_before": list(os.getloadavg())},
            "not_measured": {},
            "warnings": [],
        }

    # ------------------------------------------------------------------ set-up

    def kubectl_apply(self, obj: dict[str, Any]) -> None:
        subprocess.run(
            ["kubectl", "apply", "--server-side", "--force-conflicts", "-f", "-"],
            input=json.dumps(obj).encode(),
            check=True,
            capture_output=True,
        )

    def setup_cluster(self) -> None:
        core = client.CoreV1Api(self.admin)
        core.create_namespace(
            {
                "metadata": {
                    "name": self.ns,
                    "labels": {
                        "tooladapter.dev/environment-class": "development",
                        "tooladapter.dev/bench": "true",
                    },
                }
            }
        )
        wait_for(
            lambda: any(
                sa.metadata.name == "default"
                for sa in core.list_namespaced_service_account(self.ns).items
            ),
            timeout=60,
            what="default serviceaccount",
        )
        self.kubectl_apply(
            {
                "apiVersion": "apiextensions.k8s.io/v1",
                "kind": "CustomResourceDefinition",
                "metadata": {"name": FLOOR_CRD},
                "spec": {
                    "group": BENCH_GROUP,
                    "scope": "Namespaced",
                    "names": {
                        "plural": FLOOR_PLURAL,
                        "singular": "benchfloor",
                        "kind": "BenchFloor",
                    },
                    "versions": [
                        {
                            "name": "v1alpha1",
                            "served": True,
                            "storage": True,
                            "subresources": {"status": {}},
                            "schema": {
                                "openAPIV3Schema": {
                                    "type": "object",
                                    "properties": {
                                        "spec": {
                                            "type": "object",
                                            "x-kubernetes-preserve-unknown-fields": True,
                                        },
                                        "status": {
                                            "type": "object",
                                            "x-kubernetes-preserve-unknown-fields": True,
                                        },
                                    },
                                }
                            },
                        }
                    ],
                },
            }
        )
        subprocess.run(
            ["kubectl", "wait", "--for=condition=Established", "--timeout=60s", f"crd/{FLOOR_CRD}"],
            check=True,
            capture_output=True,
        )
        core.create_namespaced_config_map(
            self.ns, {"metadata": {"name": "bench-data"}, "data": {"greeting": "hello"}}
        )
        rbac = client.RbacAuthorizationV1Api(self.admin)
        rbac.create_namespaced_role(
            self.ns,
            {
                "metadata": {"name": "bench-agent"},
                "rules": [
                    {
                        "apiGroups": [GROUP],
                        "resources": ["tooldescriptors"],
                        "verbs": ["invoke"],
                        "resourceNames": ["read-configmap", "list-tools", "greet", "sh"],
                    },
                    {
                        "apiGroups": [GROUP],
                        "resources": ["sideeffectclasses"],
                        "verbs": ["use"],
                        "resourceNames": ["read", "sandbox"],
                    },
                    {
                        "apiGroups": [""],
                        "resources": ["configmaps"],
                        "verbs": ["get"],
                        "resourceNames": ["bench-data"],
                    },
                    {
                        "apiGroups": [BENCH_GROUP],
                        "resources": [FLOOR_PLURAL],
                        "verbs": ["create", "get", "list", "watch"],
                    },
                ],
            },
        )
        for i in range(self.cfg.agents):
            name = f"agent-{i}"
            token = token_for(self.admin, self.ns, name, seconds=6 * 3600)
            for role_kind, role in (
                ("ClusterRole", "tooladapter-requester"),
                ("Role", "bench-agent"),
            ):
                rbac.create_namespaced_role_binding(
                    self.ns,
                    {
                        "metadata": {"name": f"{name}-{role}"},
                        "roleRef": {
                            "apiGroup": "rbac.authorization.k8s.io",
                            "kind": role_kind,
                            "name": role,
                        },
                        "subjects": [
                            {"kind": "ServiceAccount", "name": name, "namespace": self.ns}
                        ],
                    },
                )
            self.agents.append(AgentClient(name, sa_user(self.ns, name), Api(self.ep, token)))

    def start_helpers(self) -> None:
        self.http_port = free_port(self.host)
        http_log = (self.workdir / "http-server.log").open("ab")
        self.procs.append(
            subprocess.Popen(
                [sys.executable, __file__, "http-server", self.host, str(self.http_port)],
                stdout=http_log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        )
        floor_log = (self.workdir / "floor-controller.log").open("ab")
        self.floor_proc = subprocess.Popen(
            [sys.executable, __file__, "floor-controller", self.ns],
            stdout=floor_log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.procs.append(self.floor_proc)
        self.operator = OperatorProcess(
            self.workdir,
            {
                # Production defaults, not the integration tests' short periods.
                "TOOLADAPTER_RECONCILE_INTERVAL_SECONDS": "30",
                "TOOLADAPTER_SANDBOX_RETAIN_SECONDS": "60",
                "TOOLADAPTER_NAMESPACES": self.ns,
                # A/B comparisons: run the operator from another copy of the package.
                **({"PYTHONPATH": self.cfg.operator_src} if self.cfg.operator_src else {}),
            },
        )
        try:
            self.operator.start()
        except AssertionError as exc:
            tail = self.operator.tail(40)
            self.operator.stop()
            raise RuntimeError(f"{exc}\noperator log (tail):\n{tail}") from None

    def publish_tools(self) -> None:
        custom = client.CustomObjectsApi(self.admin)
        tools = [
            {
                "toolId": "read-configmap",
                "kind": "native",
                "native": {"name": "read-configmap"},
                "inputSchema": {
                    "type": "object",
                    "properties": {"name": {"type": "string"}, "key": {"type": "string"}},
                    "required": ["name"],
                },
            },
            {"toolId": "list-tools", "kind": "native", "native": {"name": "list-tools"}},
            {
                "toolId": "greet",
                "kind": "http",
                "inputSchema": {
                    "type": "object",
                    "properties": {"who": {"type": "string"}},
                    "required": ["who"],
                },
                "http": {
                    "method": "GET",
                    "url": f"http://{self.host}:{self.http_port}/greet/{{who}}",
                    "allowedHosts": [f"{self.host}:{self.http_port}"],
                },
            },
            {
                "toolId": "sh",
                "kind": "shell",
                "sideEffectClass": "sandbox",
                "timeoutSeconds": 120,
                "inputSchema": {
                    "type": "object",
                    "properties": {"command": {"type": "string", "maxLength": 4096}},
                    "required": ["command"],
                    "additionalProperties": False,
                },
                "sandbox": {
                    "resources": {
                        "requests": {"cpu": "50m", "memory": "64Mi"},
                        "limits": {"cpu": "500m", "memory": "64Mi"},
                    },
                    "egress": {"allow": []},
                },
            },
        ]
        for spec in tools:
            body = {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": "ToolDescriptor",
                "metadata": {"name": spec["toolId"]},
                "spec": {"version": "1.0.0", "sideEffectClass": "read", **spec},
            }
            custom.create_namespaced_custom_object(GROUP, VERSION, self.ns, "tooldescriptors", body)
        for spec in tools:
            wait_for(
                lambda n=spec["toolId"]: (
                    custom.get_namespaced_custom_object(
                        GROUP, VERSION, self.ns, "tooldescriptors", n
                    ).get("status")
                    or {}
                ).get("active"),
                timeout=60,
                what=f"descriptor {spec['toolId']} active",
            )

    def wait_rbac(self) -> None:
        authz = client.AuthorizationV1Api(self.admin)
        for agent in self.agents:
            for verb, res, name in (
                ("invoke", "tooldescriptors", "read-configmap"),
                ("use", "sideeffectclasses", "read"),
            ):
                wait_for(
                    lambda v=verb, r=res, n=name, u=agent.user: (
                        authz.create_subject_access_review(
                            {
                                "spec": {
                                    "user": u,
                                    "groups": ["system:authenticated", "system:serviceaccounts"],
                                    "resourceAttributes": {
                                        "namespace": self.ns,
                                        "verb": v,
                                        "group": GROUP,
                                        "resource": r,
                                        "name": n,
                                    },
                                }
                            }
                        ).status.allowed
                    ),
                    timeout=30,
                    what="RBAC effective",
                )

    # ------------------------------------------------------------------ load phases

    def body_for(self, kind: str, name: str, phase: str, agent: AgentClient) -> dict[str, Any]:
        arguments: dict[str, Any]
        tool = kind
        if kind in ("read-configmap", "floor"):
            arguments = {"name": "bench-data", "key": "greeting"}
            tool = "read-configmap"
        elif kind == "http":
            tool, arguments = "greet", {"who": name}
        elif kind == "list-tools":
            arguments = {}
        else:
            tool, arguments = "sh", {"command": "echo hello"}
        spec = {
            "tool": {"id": tool, "version": "1.0.0"},
            "arguments": arguments,
            "caller": {"kind": "agent", "name": agent.user},
        }
        if kind == "floor":
            return {
                "apiVersion": f"{BENCH_GROUP}/v1alpha1",
                "kind": "BenchFloor",
                "metadata": {"name": name, "labels": {LABEL_PHASE: phase}},
                "spec": spec,
            }
        return {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "ToolInvocation",
            "metadata": {"name": name, "labels": {LABEL_PHASE: phase}},
            "spec": spec,
        }

    def path_for(self, kind: str) -> str:
        if kind == "floor":
            return ns_path(BENCH_GROUP, "v1alpha1", self.ns, FLOOR_PLURAL)
        return ns_path(GROUP, VERSION, self.ns, "toolinvocations")

    async def create(
        self,
        tracker: Tracker,
        kind: str,
        phase: str,
        idx: int,
        target: float,
        event: asyncio.Event | None = None,
    ) -> Call:
        agent = self.agents[idx % len(self.agents)]
        rec = Call(name=f"{phase}-{idx}", target=target, event=event)
        tracker.add(rec)
        rec.sent = time.time()
        try:
            status, body = await agent.api.call(
                "POST", self.path_for(kind), self.body_for(kind, rec.name, phase, agent)
            )
        except (aiohttp.ClientError, TimeoutError) as exc:
            tracker.fail(rec, f"{type(exc).__name__}: {exc}")
            return rec
        rec.created, rec.http_status = time.time(), status
        if status != 201:
            message = body.get("message") if isinstance(body, dict) else str(body)
            tracker.fail(rec, f"HTTP {status}: {str(message)[:200]}")
        return rec

    async def offered_load(
        self, kind: str, phase: str, rate: float, seconds: float, tracker: Tracker
    ) -> list[Call]:
        """Open loop: call i is due at t0 + i/rate, whatever happened to earlier calls."""
        n = max(1, round(rate * seconds))
        t0 = time.time() + 0.2
        tasks = []
        for i in range(n):
            target = t0 + i / rate
            delay = target - time.time()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.ensure_future(self.create(tracker, kind, phase, i, target)))
        return list(await asyncio.gather(*tasks))

    async def run_phase(self, kind: str, rate: float, seconds: float) -> dict[str, Any]:
        assert self.kube is not None and self.operator is not None
        phase = f"{'floor' if kind == 'floor' else kind}-{int(rate)}-{uuid.uuid4().hex[:4]}"
        tracker = Tracker(floor_terminal if kind == "floor" else invocation_terminal)
        ready = asyncio.Event()
        watcher = asyncio.ensure_future(
            self.kube.watch(
                self.path_for(kind),
                tracker.handle,
                params={"labelSelector": f"{LABEL_PHASE}={phase}"},
                ready=ready,
            )
        )
        await asyncio.wait_for(ready.wait(), 30)
        pids = {"operator": self.operator_pid(), **self.cluster_pids()}
        if self.floor_proc is not None:
            pids["floor-controller"] = self.floor_proc.pid
        meter = Meter(pids)
        bench_cpu0 = time.process_time()
        pyspy = None
        if self.cfg.pyspy and kind != "floor" and rate == max(self.cfg.loads):
            pyspy = self.start_pyspy(kind, seconds)
        calls = await self.offered_load(kind, phase, rate, seconds, tracker)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(tracker.all_done.wait(), self.cfg.drain)
        resources = meter.stop()
        resources["cpu_s"]["bench-client"] = round(time.process_time() - bench_cpu0, 2)
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher
        if pyspy is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                pyspy.wait(timeout=60)
        result = self.summarise(kind, rate, seconds, calls, resources)
        await self.delete_phase(kind, phase)
        return result

    def summarise(
        self,
        kind: str,
        rate: float,
        seconds: float,
        calls: list[Call],
        resources: dict[str, Any],
    ) -> dict[str, Any]:
        observed = [c for c in calls if c.state == "Observed"]
        states: dict[str, int] = {}
        for c in calls:
            key = c.state or "Timeout"
            states[key] = states.get(key, 0) + 1
        errors = [c.error for c in calls if c.error][:5]
        first = min((c.target for c in calls), default=0.0)
        last = max((c.done for c in observed), default=first)
        created = sum(1 for c in calls if c.http_status == 201)
        op_cpu = resources["cpu_s"].get("operator" if kind != "floor" else "floor-controller", 0)
        finished = sum(1 for c in calls if c.state in TERMINAL or (kind == "floor" and c.done))
        out = {
            "kind": kind,
            "offered_per_s": rate,
            "seconds": seconds,
            "sent": len(calls),
            "created": created,
            "observed": len(observed),
            "states": states,
            "errors": len(calls) - len(observed),
            "error_samples": errors,
            "achieved_per_s": round(len(observed) / max(1e-6, last - first), 1),
            "latency": latency_summary([c.done - c.target for c in observed]),
            "create_latency": latency_summary([c.created - c.sent for c in calls if c.created]),
            "schedule_lag_p99_ms": ms(pct([c.sent - c.target for c in calls], 99)),
            "resources": resources,
            # CPU of the phase (until the drain ended) per call the controller finished.
            "controller_cpu_s_per_1000": round(1000 * op_cpu / max(1, finished), 2),
            "controller_rss_mb_peak": resources["rss_mb_peak"].get(
                "operator" if kind != "floor" else "floor-controller"
            ),
        }
        if kind != "floor":
            out["stages"] = stage_breakdown(calls)
        lat = out["latency"]
        print(
            f"  {kind:>15} @ {rate:>5.0f}/s: p50 {lat['p50_ms']} ms, p95 {lat['p95_ms']} ms, "
            f"p99 {lat['p99_ms']} ms, achieved {out['achieved_per_s']}/s, "
            f"errors {out['errors']}, cpu/1000 {out['controller_cpu_s_per_1000']} s, "
            f"host busy {resources['host_cpu_busy_pct']}%",
            flush=True,
        )
        return out

    async def delete_phase(self, kind: str, phase: str) -> None:
        """Remove a phase's objects so every phase starts with the same stored set."""
        assert self.kube is not None
        path = self.path_for(kind)
        selector = {"labelSelector": f"{LABEL_PHASE}={phase}"}
        # Thousands of objects after an overload: the collection DELETE can take minutes,
        # and it carries on server-side even when this request gives up.
        with contextlib.suppress(aiohttp.ClientError, TimeoutError):
            await self.kube.call("DELETE", path, params=selector, timeout=300)
        deadline = time.time() + 600
        while time.time() < deadline:
            with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                status, listing = await self.kube.call(
                    "GET", path, params={**selector, "limit": "1"}
                )
                if status == 200 and not listing.get("items"):
                    break
            await asyncio.sleep(2)
        else:
            self.report["warnings"].append(f"objects of phase {phase} still present after 10 min")
        await asyncio.sleep(3)

    def operator_pid(self) -> int:
        assert self.operator is not None and self.operator.proc is not None
        return self.operator.proc.pid

    def cluster_pids(self) -> dict[str, int]:
        return pids_named("kube-apiserver", "etcd")

    def start_pyspy(self, kind: str, seconds: float) -> subprocess.Popen[bytes] | None:
        exe = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
        if not Path(exe).exists():
            self.report["warnings"].append("BENCH_PYSPY set but py-spy is not installed")
            return None
        stem, dot, ext = self.cfg.pyspy.rpartition(".")
        out = f"{stem}-{kind}.{ext}" if dot else f"{self.cfg.pyspy}-{kind}"
        fmt = {"svg": "flamegraph", "json": "speedscope"}.get(ext, "raw")
        # --gil: only the thread holding the GIL, i.e. where the operator's CPU goes.
        argv = [exe, "record", "-o", out, "-f", fmt, "--pid", str(self.operator_pid())]
        argv += ["-d", str(int(seconds)), "-r", "50", "--gil"]
        return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    # ------------------------------------------------------------------ part 1 + 2

    async def calls_and_floor(self) -> None:
        kinds = []
        if "2" in self.cfg.parts:
            kinds.append("floor")
        if "1" in self.cfg.parts or "5" in self.cfg.parts:
            kinds += self.cfg.tools
        results: dict[str, list[dict[str, Any]]] = {k: [] for k in kinds}
        self.report["loads"] = results  # filled as phases end: a failed run keeps what it has
        # Warm up every path (connections, caches, token authentication) before measuring.
        for kind in kinds:
            await self.run_phase(kind, 5, 2)
        for rate in self.cfg.loads:
            print(f"load {rate:.0f} calls/s for {self.cfg.seconds:.0f} s", flush=True)
            for kind in kinds:
                self.check_others()
                results[kind].append(await self.run_phase(kind, rate, self.cfg.seconds))
        self.report["loads"] = results

    # ------------------------------------------------------------------ part 3

    async def sandbox(self) -> None:
        ok, why = await self.pods_work()
        if not ok:
            self.report["not_measured"]["sandbox"] = why
            print(f"sandbox: not measured: {why}", flush=True)
            return
        assert self.kube is not None
        tracker = Tracker(invocation_terminal)
        ready = asyncio.Event()
        watcher = asyncio.ensure_future(
            self.kube.watch(
                self.path_for("sh"),
                tracker.handle,
                params={"labelSelector": f"{LABEL_PHASE}=sandbox"},
                ready=ready,
            )
        )
        jobs = JobWatcher(self.kube, self.ns)
        await asyncio.wait_for(ready.wait(), 30)
        await jobs.start()
        idx = 0

        async def ours() -> Call:
            nonlocal idx
            idx += 1
            rec_event = asyncio.Event()
            target = time.time()
            agent = self.agents[idx % len(self.agents)]
            rec = Call(name=f"sandbox-{idx}", target=target, event=rec_event)
            tracker.add(rec)
            rec.sent = target
            status, body = await agent.api.call(
                "POST", self.path_for("sh"), self.body_for("sh", rec.name, "sandbox", agent)
            )
            rec.created, rec.http_status = time.time(), status
            if status != 201:
                tracker.fail(rec, f"HTTP {status}: {body}")
                return rec
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(rec_event.wait(), 300)
            return rec

        # The pod-level floor needs a canary like the operator's: a listener on the node's
        # address that the NetworkPolicy makes unreachable (see pipeline.sandbox.GATE_SCRIPT).
        canary = await asyncio.start_server(_close_connection, host=self.host, port=0)
        gate = (self.host, int(canary.sockets[0].getsockname()[1]))

        async def same_pod_spec() -> Call:
            return await jobs.run_one(gate=gate)

        async def tool_only() -> Call:
            return await jobs.run_one()

        variants: list[tuple[str, Callable[[], Awaitable[Call]]]] = [
            ("ours", ours),
            ("job_same_pod_spec", same_pod_spec),
            ("job_tool_only", tool_only),
        ]
        seq: dict[str, list[Call]] = {label: [] for label, _ in variants}
        conc: dict[str, list[Call]] = {label: [] for label, _ in variants}
        makespans: dict[str, list[float]] = {label: [] for label, _ in variants}
        try:
            # One unmeasured call of each warms the image and the kubelet's caches; then the
            # variants take turns, so drift on a shared machine hits them alike.
            for _, fn in variants:
                await fn()
            for _ in range(self.cfg.sandbox_sequential):
                for label, fn in variants:
                    seq[label].append(await fn())
            for _ in range(self.cfg.sandbox_rounds):
                for label, fn in variants:
                    t0 = time.time()
                    batch = await asyncio.gather(
                        *[fn() for _ in range(self.cfg.sandbox_concurrent)]
                    )
                    makespans[label].append(max((c.done or time.time()) for c in batch) - t0)
                    conc[label] += batch
        finally:
            canary.close()
            watcher.cancel()
            await jobs.stop()
        out: dict[str, Any] = {
            "floors": {
                "job_same_pod_spec": "a bare Job with the operator's pod spec (network-gate init "
                "container) and its default-deny NetworkPolicy, created by the bench",
                "job_tool_only": "a bare Job of the tool container alone (no gate, no policy)",
            },
            "concurrency": self.cfg.sandbox_concurrent,
        }
        for label, _ in variants:
            calls = seq[label] + conc[label]
            out[label] = {
                "sequential": latency_summary(
                    [c.done - c.target for c in seq[label] if c.state == "Observed"]
                ),
                "concurrent": latency_summary(
                    [c.done - c.target for c in conc[label] if c.state == "Observed"]
                ),
                "concurrent_makespan_s": [round(m, 2) for m in makespans[label]],
                "errors": [c.error or c.state for c in calls if c.state != "Observed"][:5],
                "error_count": sum(1 for c in calls if c.state != "Observed"),
            }
        out["stages"] = stage_breakdown(seq["ours"] + conc["ours"])
        ratios = {}
        for floor in ("job_same_pod_spec", "job_tool_only"):
            for mode in ("sequential", "concurrent"):
                for p in ("p50_ms", "p95_ms"):
                    ratios[f"vs {floor}: {mode} {p}"] = _ratio(
                        out["ours"][mode][p], out[floor][mode][p]
                    )
        out["ratios_vs_bare_job"] = ratios
        self.report["sandbox"] = out
        print(f"sandbox: {json.dumps(ratios)}", flush=True)

    async def pods_work(self) -> tuple[bool, str]:
        """A tiny Job with the sandbox pod spec: does the node run pods at all right now?"""
        assert self.kube is not None
        jobs = JobWatcher(self.kube, self.ns)
        await jobs.start()
        try:
            rec = await jobs.run_one(timeout=120)
        finally:
            await jobs.stop()
        if rec.state == "Observed":
            return True, ""
        _status, events = await self.kube.call(
            "GET", ns_path("", "v1", self.ns, "events"), params={"fieldSelector": "type=Warning"}
        )
        messages = sorted(
            {
                f"{e.get('reason')}: {e.get('message')}"[:300]
                for e in (events or {}).get("items", [])
                if e.get("involvedObject", {}).get("kind") == "Pod"
            }
        )
        return False, f"a bare Job did not complete in 120 s ({rec.error or rec.state}); " + (
            "; ".join(messages[:3]) or "no pod warning events"
        )

    # ------------------------------------------------------------------ part 4

    async def fill(self) -> None:
        assert self.operator is not None
        n = self.cfg.fill
        print(
            f"fill: {n} finished invocations, at most {self.cfg.fill_rate:.0f}/s and "
            f"{self.cfg.fill_inflight} unfinished at a time",
            flush=True,
        )
        tracker = Tracker(invocation_terminal)
        assert self.kube is not None
        ready = asyncio.Event()
        watcher = asyncio.ensure_future(
            self.kube.watch(
                self.path_for("read-configmap"),
                tracker.handle,
                params={"labelSelector": f"{LABEL_PHASE}=fill"},
                ready=ready,
            )
        )
        await asyncio.wait_for(ready.wait(), 30)
        pid = self.operator_pid()
        cpu0 = proc_cpu_seconds(pid)
        # Not a latency measurement: a bounded number of unfinished calls, so the fill runs
        # at whatever rate this machine sustains and memory is not a backlog's.
        inflight = asyncio.Semaphore(self.cfg.fill_inflight)

        async def one(i: int, target: float) -> Call:
            done = asyncio.Event()
            try:
                rec = await self.create(tracker, "read-configmap", "fill", i, target, done)
                if rec.http_status == 201:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(done.wait(), 600)
                return rec
            finally:
                inflight.release()

        t0 = time.time()
        tasks = []
        for i in range(n):
            target = t0 + i / self.cfg.fill_rate
            if (delay := target - time.time()) > 0:
                await asyncio.sleep(delay)
            await inflight.acquire()
            tasks.append(asyncio.ensure_future(one(i, time.time())))
        calls = list(await asyncio.gather(*tasks))
        fill_seconds = time.time() - t0
        watcher.cancel()
        cpu = proc_cpu_seconds(pid) - cpu0
        after = proc_mem_mb(pid)
        finished = sum(1 for c in calls if c.state in TERMINAL)
        # One reconcile period, so the periodic workers have walked the stored set.
        await asyncio.sleep(35)
        after_workers = proc_mem_mb(pid)
        _status, listing = await self.kube.call(
            "GET", self.path_for("read-configmap"), params={"limit": "1"}
        )
        stored = (listing.get("metadata") or {}).get("remainingItemCount", 0) + len(
            listing.get("items", [])
        )
        # A restarted operator lists everything stored: the honest "RSS with N stored".
        self.operator.stop()
        self.operator.start()
        pid = self.operator_pid()
        await asyncio.sleep(40)
        restarted = proc_mem_mb(pid)
        self.report["fill"] = {
            "created": sum(1 for c in calls if c.http_status == 201),
            "finished": finished,
            "observed": sum(1 for c in calls if c.state == "Observed"),
            "stored_invocations": stored,
            "operator_cpu_s_per_1000": round(1000 * cpu / max(1, finished), 2),
            "achieved_per_s": round(finished / max(1e-6, fill_seconds), 1),
            "rss_mb_after_processing": round(after["rss_mb"], 1),
            "rss_mb_after_one_reconcile_period": round(after_workers["rss_mb"], 1),
            "hwm_mb_processing_operator": round(after_workers["hwm_mb"], 1),
            "rss_mb_restarted_with_stored": round(restarted["rss_mb"], 1),
            "hwm_mb_restarted_with_stored": round(restarted["hwm_mb"], 1),
            "latency": latency_summary([c.done - c.target for c in calls if c.state == "Observed"]),
        }
        print(f"fill: {json.dumps(self.report['fill'])}", flush=True)

    # ------------------------------------------------------------------ bookkeeping

    def check_others(self) -> None:
        mine = {p.pid for p in self.procs} | {os.getpid()}
        if self.operator is not None and self.operator.proc is not None:
            mine.add(self.operator.proc.pid)
        others = other_operators(mine, self.ns)
        if others:
            warning = f"other tooladapter operators running during the bench: {others}"
            if warning not in self.report["warnings"]:
                self.report["warnings"].append(warning)

    async def run(self) -> None:
        self.kube = Api(self.ep, limit=32)
        try:
            self.setup_cluster()
            self.start_helpers()
            self.publish_tools()
            self.wait_rbac()
            if self.cfg.parts & {"1", "2", "5"}:
                await self.calls_and_floor()
            if "3" in self.cfg.parts:
                await self.sandbox()
            if "4" in self.cfg.parts:
                await self.fill()
        finally:
            for agent in self.agents:
                await agent.api.close()
            await self.kube.close()

    def cleanup(self) -> None:
        if self.operator is not None:
            self.operator.stop()
        for proc in self.procs:
            if proc.poll() is None:
                proc.terminate()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=10)
        if self.cfg.keep:
            return
        core = client.CoreV1Api(self.admin)
        with contextlib.suppress(Exception):
            core.delete_namespace(self.ns)
        with contextlib.suppress(Exception):
            wait_for(
                lambda: not any(n.metadata.name == self.ns for n in core.list_namespace().items),
                timeout=300,
                what="bench namespace gone",
                interval=2,
            )
        with contextlib.suppress(Exception):
            client.ApiextensionsV1Api(self.admin).delete_custom_resource_definition(FLOOR_CRD)
        shutil.rmtree(self.workdir, ignore_errors=True)


async def _close_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    writer.close()


def _ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or b == 0:
        return None
    return round(a / b, 2)


class JobWatcher:
    """The sandbox floor: a bare Job with the operator's pod spec, create -> Complete + log."""

    def __init__(self, kube: Api, namespace: str) -> None:
        self.kube = kube
        self.ns = namespace
        self.waiting: dict[str, tuple[asyncio.Event, list[Any]]] = {}
        self.task: asyncio.Future[None] | None = None

    async def start(self) -> None:
        ready = asyncio.Event()
        self.task = asyncio.ensure_future(
            self.kube.watch(
                ns_path("batch", "v1", self.ns, "jobs"),
                self.handle,
                params={"labelSelector": f"app.kubernetes.io/managed-by={BENCH_JOB_MANAGER}"},
                ready=ready,
            )
        )
        await asyncio.wait_for(ready.wait(), 30)

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task

    def handle(self, kind: str, obj: dict[str, Any], now: float) -> None:
        name = obj["metadata"]["name"]
        if name not in self.waiting:
            return
        for cond in (obj.get("status") or {}).get("conditions") or []:
            if cond.get("status") == "True" and cond.get("type") in ("Complete", "Failed"):
                event, box = self.waiting[name]
                if not box:
                    box.append((cond["type"], now))
                    event.set()

    def job(self, uid: str, gate: tuple[str, int] | None = None) -> dict[str, Any]:
        from tooladapter.model import SandboxSpec
        from tooladapter.pipeline.sandbox import LABEL_MANAGED_BY, build_job

        sandbox = SandboxSpec.model_validate(
            {
                "resources": {
                    "requests": {"cpu": "50m", "memory": "64Mi"},
                    "limits": {"cpu": "500m", "memory": "64Mi"},
                },
                "egress": {"allow": []},
            }
        )
        image = os.environ.get("TOOLADAPTER_SANDBOX_IMAGE", "localhost/tooladapter-sandbox:dev")
        job = build_job(
            namespace=self.ns,
            uid=uid,
            invocation_name=f"bare-{uid[:8]}",
            owner={},
            sandbox=sandbox,
            image=image,
            argv=["echo", "hello"],
            arguments={"command": "echo hello"},
            timeout_seconds=120,
            lease_id=uid,
            network_gate=gate,
            gate_image=image,
        )
        job["metadata"].pop("ownerReferences", None)
        job["metadata"]["name"] = f"bare-{uid}"
        for labels in (job["metadata"]["labels"], job["spec"]["template"]["metadata"]["labels"]):
            labels[LABEL_MANAGED_BY] = BENCH_JOB_MANAGER  # never the operator's reaper's
        return job

    def network_policy(self, uid: str) -> dict[str, Any]:
        from tooladapter.pipeline.sandbox import LABEL_MANAGED_BY, build_network_policy

        policy = build_network_policy(namespace=self.ns, uid=uid, owner={}, egress_allow=[])
        policy["metadata"].pop("ownerReferences", None)
        policy["metadata"]["name"] = f"bare-{uid}"
        policy["metadata"]["labels"][LABEL_MANAGED_BY] = BENCH_JOB_MANAGER
        return policy

    async def run_one(self, timeout: float = 300, gate: tuple[str, int] | None = None) -> Call:
        """One Job to its end plus its log; with `gate`, the operator's pod spec and policy."""
        uid = str(uuid.uuid4())
        job = self.job(uid, gate)
        name = job["metadata"]["name"]
        event: asyncio.Event = asyncio.Event()
        box: list[Any] = []
        self.waiting[name] = (event, box)
        rec = Call(name=name, target=time.time())
        rec.sent = rec.target
        netpols = ns_path("networking.k8s.io", "v1", self.ns, "networkpolicies")
        if gate is not None:
            status, body = await self.kube.call("POST", netpols, self.network_policy(uid))
            if status != 201:
                rec.error, rec.state = f"HTTP {status}: {body}", "CreateError"
                return rec
        status, body = await self.kube.call("POST", ns_path("batch", "v1", self.ns, "jobs"), job)
        rec.created, rec.http_status = time.time(), status
        if status != 201:
            rec.error, rec.state = f"HTTP {status}: {body}", "CreateError"
            return rec
        try:
            await asyncio.wait_for(event.wait(), timeout)
        except TimeoutError:
            rec.state, rec.error = "Timeout", f"job {name} did not finish in {timeout:.0f}s"
            await self.delete(name)
            return rec
        finally:
            self.waiting.pop(name, None)
        outcome, _ = box[0]
        status, pods = await self.kube.call(
            "GET",
            ns_path("", "v1", self.ns, "pods"),
            params={"labelSelector": f"tooladapter.dev/invocation-uid={uid}"},
        )
        items = pods.get("items", []) if isinstance(pods, dict) else []
        log = ""
        if items:
            _, log = await self.kube.text(
                ns_path("", "v1", self.ns, "pods") + f"/{items[0]['metadata']['name']}/log",
                params={"container": "tool", "limitBytes": "1048577"},
            )
        rec.done = time.time()
        rec.state = "Observed" if outcome == "Complete" and "hello" in log else "Failed"
        if rec.state != "Observed":
            rec.error = f"job {outcome}, log {log[:100]!r}"
        await self.delete(name)
        if gate is not None:
            await self.kube.call("DELETE", f"{netpols}/bare-{uid}")
        return rec

    async def delete(self, name: str) -> None:
        await self.kube.call(
            "DELETE",
            ns_path("batch", "v1", self.ns, "jobs") + f"/{name}",
            {"propagationPolicy": "Background", "gracePeriodSeconds": 0},
        )


# ---------------------------------------------------------------------------- helpers run
# as their own processes: the floor's minimal controller and the http tool's server.


async def floor_controller(namespace: str) -> None:
    """Patch status once per BenchFloor: the least a controller of a CR-based call does."""
    api = Api(Endpoint.from_kubeconfig(kubeconfig()), limit=64)
    path = ns_path(BENCH_GROUP, "v1alpha1", namespace, FLOOR_PLURAL)
    seen: set[str] = set()
    tasks: set[asyncio.Future[Any]] = set()

    async def settle(name: str) -> None:
        status, _ = await api.call(
            "PATCH",
            f"{path}/{name}/status",
            {"status": {"state": "Observed", "observedAt": time.time()}},
            content_type="application/merge-patch+json",
        )
        if status != 200:
            seen.discard(name)  # retried on its next event

    def handle(kind: str, obj: dict[str, Any], now: float) -> None:
        name = obj["metadata"]["name"]
        if kind == "DELETED":
            seen.discard(name)
            return
        if name in seen or (obj.get("status") or {}).get("state"):
            return
        seen.add(name)
        task = asyncio.ensure_future(settle(name))
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    print(f"floor controller watching {path}", flush=True)
    await api.watch(path, handle)


async def http_server(host: str, port: int) -> None:
    async def greet(request: web.Request) -> web.Response:
        return web.json_response({"path": request.path, "greeting": "hello from the node"})

    app = web.Application()
    app.router.add_get("/{tail:.*}", greet)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    print(f"http server on {host}:{port}", flush=True)
    await asyncio.Event().wait()


# ---------------------------------------------------------------------------- report


def ratios_vs_floor(report: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """Ours / floor at each offered load both were measured at."""
    loads = report.get("loads") or {}
    floors = {r["offered_per_s"]: r for r in loads.get("floor", [])}
    ratios: dict[str, list[dict[str, Any]]] = {}
    for kind, rows in loads.items():
        if kind == "floor" or not floors:
            continue
        ratios[kind] = [
            {
                "offered_per_s": ours["offered_per_s"],
                **{
                    f"{p}_ratio": _ratio(ours["latency"][p], floor["latency"][p])
                    for p in ("p50_ms", "p95_ms", "p99_ms")
                },
                "achieved_ratio": _ratio(ours["achieved_per_s"], floor["achieved_per_s"]),
            }
            for ours in rows
            if (floor := floors.get(ours["offered_per_s"])) is not None
        ]
    return ratios


def goals(report: dict[str, Any]) -> dict[str, Any]:
    """The issue's targets, each with the measured value and whether it was met."""
    out: dict[str, Any] = {}
    loads = report.get("loads") or {}
    for tool, rows in loads.items():
        if tool == "floor":
            continue
        sustained = [
            r["offered_per_s"]
            for r in rows
            if r["errors"] == 0 and r["achieved_per_s"] >= 0.95 * r["offered_per_s"]
        ]
        best = max(sustained, default=None)
        out[f"{tool}: sustained calls/s >= 100"] = {"value": best, "met": (best or 0) >= 100}
        at50 = next((r for r in rows if r["offered_per_s"] == 50), None)
        if at50 is not None:
            p95 = at50["latency"]["p95_ms"]
            out[f"{tool}: p95 at 50/s <= 250 ms"] = {
                "value": p95,
                "met": p95 is not None and p95 <= 250 and at50["errors"] == 0,
            }
    for tool, rows in (report.get("ratios_vs_floor") or {}).items():
        worst = max((r["p95_ms_ratio"] or 0 for r in rows), default=None)
        out[f"{tool}: p95 ours/floor <= 3 at every load"] = {
            "value": worst,
            "met": worst is not None and worst <= 3,
        }
    sandbox = report.get("sandbox")
    if sandbox:
        worst = max(
            v or 0
            for k, v in sandbox["ratios_vs_bare_job"].items()
            if k.startswith("vs job_same_pod_spec")
        )
        out["sandbox: ours/bare Job (same pod spec) <= 1.10"] = {
            "value": worst,
            "met": worst <= 1.10,
        }
    fill = report.get("fill")
    if fill:
        rss = max(fill["rss_mb_after_processing"], fill["rss_mb_restarted_with_stored"])
        out[f"RSS with {fill['stored_invocations']} stored <= 150 MB"] = {
            "value": rss,
            "met": rss <= 150,
        }
    return out


def print_table(report: dict[str, Any]) -> None:
    print("\n=== tooladapter bench ===")
    ratios = report.get("ratios_vs_floor") or {}
    if ratios:
        print("Ratios ours / floor (goal <= 3x):")
        print(f"  {'tool':<15} {'load/s':>7} {'p50':>6} {'p95':>6} {'p99':>6} {'thru':>6}")
        for tool, rows in ratios.items():
            for r in rows:
                print(
                    f"  {tool:<15} {r['offered_per_s']:>7.0f} {_f(r['p50_ms_ratio']):>6} "
                    f"{_f(r['p95_ms_ratio']):>6} {_f(r['p99_ms_ratio']):>6} "
                    f"{_f(r['achieved_ratio']):>6}"
                )
    sandbox = report.get("sandbox")
    if sandbox:
        print("Sandbox ours / bare Job (goal <= 1.10 against the same pod spec):")
        for k, v in sandbox["ratios_vs_bare_job"].items():
            print(f"  {k:<45} {_f(v)}")
    elif "sandbox" in report.get("not_measured", {}):
        print(f"Sandbox: not measured: {report['not_measured']['sandbox'][:300]}")
    loads = report.get("loads") or {}
    if loads:
        print("Absolute (create -> terminal seen on a watch, ms; throughput /s; operator):")
        print(
            f"  {'kind':<15} {'load/s':>7} {'p50':>8} {'p95':>8} {'p99':>8} {'achvd':>6} "
            f"{'err':>5} {'cpu s/1k':>8} {'rss MB':>7} {'host%':>6}"
        )
        for kind, rows in loads.items():
            for r in rows:
                lat = r["latency"]
                print(
                    f"  {kind:<15} {r['offered_per_s']:>7.0f} {_f(lat['p50_ms']):>8} "
                    f"{_f(lat['p95_ms']):>8} {_f(lat['p99_ms']):>8} {r['achieved_per_s']:>6} "
                    f"{r['errors']:>5} {_f(r['controller_cpu_s_per_1000']):>8} "
                    f"{_f(r['controller_rss_mb_peak']):>7} "
                    f"{r['resources']['host_cpu_busy_pct']:>6}"
                )
    if sandbox:
        for label in ("ours", "job_same_pod_spec", "job_tool_only"):
            s = sandbox[label]
            print(
                f"  sandbox {label:<17} sequential p50 {s['sequential']['p50_ms']} ms "
                f"p95 {s['sequential']['p95_ms']} ms; {sandbox['concurrency']} concurrent p50 "
                f"{s['concurrent']['p50_ms']} ms, makespans {s['concurrent_makespan_s']} s"
            )
    fill = report.get("fill")
    if fill:
        print(
            f"Stored {fill['stored_invocations']} invocations: operator RSS "
            f"{fill['rss_mb_after_processing']} MB after processing, "
            f"{fill['rss_mb_restarted_with_stored']} MB restarted "
            f"(peak {fill['hwm_mb_restarted_with_stored']} MB; goal <= 150 MB); "
            f"{fill['operator_cpu_s_per_1000']} CPU s per 1000 calls"
        )
    stage_sets = [
        (f"{kind} at {r['offered_per_s']:.0f}/s", r.get("stages") or {})
        for kind, rows in loads.items()
        if kind != "floor"
        for r in (rows[:1] + rows[-1:] if len(rows) > 1 else rows)
    ]
    if sandbox:
        stage_sets.append(("sandboxed shell calls", sandbox.get("stages") or {}))
    for label, stages in stage_sets:
        if stages.get("segments"):
            print(f"Stages of {label} (p50 / mean ms):")
            for seg in stages["segments"]:
                print(f"  {seg['segment']:<52} {_f(seg['p50_ms']):>8} {_f(seg['mean_ms']):>8}")
            print(f"  slowest: {stages['slowest']}")
    for name, goal in (report.get("goals") or {}).items():
        print(f"goal {'met' if goal['met'] else 'NOT met'}: {name} (measured {goal['value']})")
    machine = report["machine"]
    print(
        f"Machine: {machine['cpus']} CPUs, load before {machine['loadavg_before']}, "
        f"after {machine.get('loadavg_after')}"
    )
    for w in report.get("warnings", []):
        print(f"WARNING: {w}")
    for k, v in report.get("not_measured", {}).items():
        print(f"not measured: {k}: {v[:300]}")


def _f(v: Any) -> str:
    return "-" if v is None else str(v)


def main(argv: list[str]) -> None:
    if argv[:1] == ["floor-controller"]:
        asyncio.run(floor_controller(argv[1]))
        return
    if argv[:1] == ["http-server"]:
        asyncio.run(http_server(argv[1], int(argv[2])))
        return
    cfg = Config.parse(argv)
    bench = Bench(cfg)
    print(f"bench {bench.run_id}: namespace {bench.ns}, workdir {bench.workdir}", flush=True)
    try:
        asyncio.run(bench.run())
    finally:
        bench.report["machine"]["loadavg_after"] = list(os.getloadavg())
        bench.report["finished"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        if bench.operator is not None and bench.operator.proc is not None:
            log = bench.operator.log_text()
            bench.report["operator_log_errors"] = [
                line[:300] for line in log.splitlines() if "ERROR" in line or "Traceback" in line
            ][:20]
        bench.cleanup()
        bench.report["ratios_vs_floor"] = ratios_vs_floor(bench.report)
        bench.report["goals"] = goals(bench.report)
        cfg.report.write_text(json.dumps(bench.report, indent=2, default=str) + "\n")
        print_table(bench.report)
        print(f"report: {cfg.report}")


if __name__ == "__main__":
    main(sys.argv[1:])
