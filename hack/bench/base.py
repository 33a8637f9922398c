"""The bench's state and what every part does with it: build, send and place one call."""

from __future__ import annotations

import asyncio
import os
import subprocess
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import aiohttp

from tooladapter import GROUP, VERSION
from tooladapter.devtools import OperatorProcess, admin_client, kubeconfig, node_ip

from .api import Api, Endpoint, ns_path
from .calls import Call, Tracker
from .config import BENCH_GROUP, FLOOR_PLURAL, LABEL_PHASE, Config
from .procfs import other_operators, pids_named


@dataclass
class AgentClient:
    name: str
    user: str
    api: Api


class BenchBase:
    """The run's identity, cluster handles, helper processes and report; the parts
    (setup, load, sandbox, fill) are mixins of it that `runner.Bench` puts together."""

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

    # ------------------------------------------------------------------ one call

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

    def operator_pid(self) -> int:
        assert self.operator is not None and self.operator.proc is not None
        return self.operator.proc.pid

    def cluster_pids(self) -> dict[str, int]:
        return pids_named("kube-apiserver", "etcd")

    def check_others(self) -> None:
        mine = {p.pid for p in self.procs} | {os.getpid()}
        if self.operator is not None and self.operator.proc is not None:
            mine.add(self.operator.proc.pid)
        others = other_operators(mine, self.ns)
        if others:
            warning = f"other tooladapter operators running during the bench: {others}"
            if warning not in self.report["warnings"]:
                self.report["warnings"].append(warning)
