"""The run: set-up, load with faults, settling, the one-key creators, clean-up."""

from __future__ import annotations

import contextlib
import fnmatch
import os
import random
import shutil
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from kubernetes import client

from tooladapter import GROUP, VERSION
from tooladapter.devtools import Namespace, admin_client, free_port, node_ip, wait_for
from tooladapter.kube.leases import lease_name

from .config import TERMINAL, Config
from .counter import CountingServer
from .faults import ApiServerRestarter, FaultPlan, PodDeleter, local_apiserver, schedule
from .load import Load, same_key
from .objects import TIMEOUT, Agent, custom, http_tool, list_all, shell_tool, wait_active
from .supervisor import SupervisedOperator
from .tracker import Reviewer, Tracker, state_of

LEASE_NAMESPACE = "tooladapter-system"
#: How long to keep watching calls still unfinished at the deadline (for the report).
EXTRA_WAIT = 60.0


def log(message: str) -> None:
    print(f"[chaos {time.strftime('%H:%M:%S')}] {message}", flush=True)


def other_operators(scope: str) -> list[str]:
    """Other tooladapter operator processes on this host that would serve `scope` too."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        with contextlib.suppress(OSError):
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            if b"tooladapter" not in argv or b"run" not in argv:
                continue
            patterns = ["*"]
            for var in (entry / "environ").read_bytes().split(b"\0"):
                if var.startswith(b"TOOLADAPTER_NAMESPACES="):
                    raw = var.split(b"=", 1)[1].decode()
                    patterns = [p.strip() for p in raw.split(",") if p.strip()] or ["*"]
            if any(fnmatch.fnmatch(scope, p) for p in patterns):
                found.append(f"pid {entry.name} serves {patterns}")
    return found


class Chaos:
    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.rng = random.Random(cfg.seed)
        random.seed(cfg.seed)
        self.run_id = uuid.uuid4().hex[:6]
        self.prefix = f"chaos-{self.run_id}"
        self.admin = admin_client()
        self.host = node_ip()
        self.workdir = Path(tempfile.mkdtemp(prefix="tooladapter-chaos-"))
        self.namespaces: list[Namespace] = []
        self.server = CountingServer(self.host, free_port(self.host), cfg.http_delay)
        self.operator = SupervisedOperator(
            self.workdir,
            {
                "TOOLADAPTER_NAMESPACES": f"{self.prefix}-*",
                "TOOLADAPTER_LEASE_SECONDS": str(cfg.lease_seconds),
            },
            cfg.operator_src,
        )
        self.restarter = ApiServerRestarter()
        self.trackers: list[Tracker] = []
        self.reviewer: Reviewer | None = None
        self.plan: FaultPlan | None = None
        self.deleter: PodDeleter | None = None
        self.load: Load | None = None
        self.final: dict[str, dict[str, Any]] = {}
        self.same_final: dict[str, dict[str, Any]] = {}
        self.result: dict[str, Any] = {
            "run_id": self.run_id,
            "seed": cfg.seed,
            "workdir": str(self.workdir),
            "operator_source": self.operator.source,
            "warnings": [],
        }

    # ----------------------------------------------------------------- set-up

    def setup(self) -> None:
        pid, why = local_apiserver()
        self.result["apiserver_restartable"] = pid is not None or why
        for other in other_operators(f"{self.prefix}-x"):
            self.result["warnings"].append(f"another operator serves our namespaces: {other}")
        self.server.start()
        self.operator.start()
        labels = {"tooladapter.dev/environment-class": "development"}
        load_ns = Namespace(self.admin, labels, prefix=self.prefix)
        self.namespaces.append(load_ns)
        same_ns = Namespace(self.admin, labels, prefix=self.prefix)
        self.namespaces.append(same_ns)
        address = self.server.address
        ns = load_ns.name
        custom(self.admin).create_namespaced_custom_object(
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
                    "sideEffectClass": "read",
                    "native": {"name": "list-tools"},
                },
            },
            _request_timeout=TIMEOUT,
        )
        http_tool(self.admin, ns, "effect", "external", address)
        http_tool(self.admin, ns, "gated", "shared-write", address)
        shell_tool(self.admin, ns, "sh", [f"{self.host}/32"])
        http_tool(self.admin, same_ns.name, "effect", "external", address)
        wait_active(self.admin, ns, ["list-tools", "effect", "gated", "sh"])
        wait_active(self.admin, same_ns.name, ["effect"])
        agent = Agent.create(self.admin, ns, "agent")
        agent.grant(
            ["list-tools", "effect", "gated", "sh"], ["read", "external", "shared-write", "sandbox"]
        )
        same_agent = Agent.create(self.admin, same_ns.name, "agent")
        same_agent.grant(["effect"], ["external"])
        pairs = []
        for namespace in (ns, same_ns.name):
            reviewer = Agent.create(self.admin, namespace, "reviewer", role="tooladapter-reviewer")
            tracker = Tracker(self.admin, namespace)
            tracker.start()
            self.trackers.append(tracker)
            pairs.append((tracker, reviewer))
        self.reviewer = Reviewer(pairs)
        self.reviewer.start()
        self.load = Load(agent, address, self.run_id, self.cfg.invocations, self.cfg.rate)
        self.same_agent = same_agent
        self.result["namespaces"] = [n.name for n in self.namespaces]
        self.result["counting_server"] = address

    # ------------------------------------------------------------ load, faults

    def load_with_faults(self) -> None:
        assert self.load is not None
        cfg = self.cfg
        start = time.time() + 1.0
        events, deletions = schedule(
            self.rng, start, cfg.load_seconds, cfg.kills, cfg.apiserver_restarts, cfg.pod_deletes
        )
        self.plan = FaultPlan(self.operator, self.restarter, events)
        self.deleter = PodDeleter(self.admin, self.namespaces[0].name, deletions)
        time.sleep(max(0.0, start - time.time()))
        loader = threading.Thread(target=self.load.run, name="load", daemon=True)
        loader.start()
        self.plan.thread.start()
        self.deleter.thread.start()
        log(
            f"load: {cfg.invocations} calls at {cfg.rate}/s over {cfg.load_seconds:.0f} s; "
            f"faults: {cfg.kills} kills, {cfg.apiserver_restarts} API server restarts, "
            f"{cfg.pod_deletes} pod deletions"
        )
        while not (self.load.done.is_set() and self.plan.finished.is_set()):
            time.sleep(10)
            self.check_operator()
            self.progress()
        self.deleter.thread.join()
        loader.join()
        self.result["load_started"] = self.load.started_at
        self.result["load_ended"] = self.load.ended_at

    def check_operator(self) -> None:
        if self.operator.broken:
            raise RuntimeError(self.operator.broken)

    def progress(self) -> None:
        assert self.load is not None and self.plan is not None and self.deleter is not None
        created = sum(1 for c in self.load.calls if c.created)
        states = self.trackers[0].states()
        log(
            f"created {created}/{len(self.load.calls)}; kills {len(self.plan.kills)}, "
            f"API server restarts {len(self.plan.restarts)}, pods deleted "
            f"{len(self.deleter.deleted)}, operator exits {len(self.operator.exits)}; "
            f"states {dict(sorted(states.items()))}"
        )

    def last_fault(self) -> float:
        assert self.plan is not None and self.deleter is not None
        ends = [k["ended"] for k in self.plan.kills]
        ends += [r.get("ended", r["at"]) for r in self.plan.restarts]
        ends += [d["ended"] for d in self.deleter.deleted]
        return max(ends, default=time.time())

    # ----------------------------------------------------------------- settle

    def settle(self) -> None:
        assert self.load is not None
        names = self.load.names()
        last = self.last_fault()
        deadline = last + self.cfg.settle_seconds
        log(
            "settling: every call terminal by "
            f"{time.strftime('%H:%M:%S', time.localtime(deadline))}"
        )
        settled_at = None
        while time.time() < deadline:
            if not self.trackers[0].unfinished(names) and self.confirmed_terminal(names):
                settled_at = time.time()
                break
            self.check_operator()
            time.sleep(1.0)
        stuck = self.unfinished_now(names)
        self.result["settle"] = {
            "last_fault": last,
            "deadline": deadline,
            "settled_after_last_fault_s": round(settled_at - last, 1) if settled_at else None,
            "non_terminal_at_deadline": stuck,
        }
        if stuck:
            log(
                f"{len(stuck)} calls not terminal "
                f"{self.cfg.settle_seconds:.0f} s after the last fault"
            )
            later = time.time() + EXTRA_WAIT
            while time.time() < later and self.unfinished_now(names):
                time.sleep(5)
            still = self.unfinished_now(names)
            self.result["settle"]["still_non_terminal_after_extra_s"] = {
                "extra_seconds": EXTRA_WAIT,
                "names": still,
            }
        self.final = self.fresh(self.namespaces[0].name)

    def fresh(self, namespace: str) -> dict[str, dict[str, Any]]:
        objs = wait_for(
            lambda: list_all(self.admin, namespace, "toolinvocations") or None,
            timeout=120,
            what=f"invocations of {namespace}",
        )
        return {o["metadata"]["name"]: o for o in objs}

    def confirmed_terminal(self, names: set[str]) -> bool:
        return not self.unfinished_now(names)

    def unfinished_now(self, names: set[str]) -> list[str]:
        try:
            objs = self.fresh(self.namespaces[0].name)
        except AssertionError:
            return sorted(names)
        return sorted(n for n in names if n not in objs or state_of(objs[n]) not in TERMINAL)

    # --------------------------------------------------------- one key, many

    def one_key_many_creators(self) -> None:
        key = f"same-{self.run_id}"
        log(f"{self.cfg.creators} concurrent creators of key {key}")
        began = time.time()
        created = same_key(self.same_agent, self.cfg.creators, key)
        names = {name for name, ok, _ in created if ok}
        tracker = self.trackers[1]
        with contextlib.suppress(AssertionError):
            wait_for(
                lambda: not tracker.unfinished(names),
                timeout=180,
                what="the one-key calls terminal",
                interval=1.0,
            )
        self.same_final = self.fresh(self.namespaces[1].name)
        self.result["same_key"] = {
            "key": key,
            "path": f"/effect/{key}",
            "created": len(names),
            "create_errors": [e for _, ok, e in created if not ok],
            "seconds": round(time.time() - began, 1),
        }

    # ------------------------------------------------------------- clean-up

    def cleanup(self, keep_workdir: bool) -> None:
        for stoppable in (self.plan, self.deleter):
            if stoppable is not None:
                stoppable.stopping.set()
        if self.reviewer is not None:
            self.reviewer.stop()
        for tracker in self.trackers:
            tracker.stop()
        if not self.cfg.keep:
            self.delete_namespaces(30 if self.operator.broken else 180)
        self.operator.stop()
        with contextlib.suppress(Exception):
            client.CoordinationV1Api(self.admin).delete_namespaced_lease(
                lease_name([f"{self.prefix}-*"]), LEASE_NAMESPACE
            )
        self.server.stop()
        if keep_workdir or self.cfg.keep:
            log(f"kept the operator's workdir (log, artifacts): {self.workdir}")
        else:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def delete_namespaces(self, timeout: float) -> None:
        """Delete them while the operator still runs (it lets go of its finalizers); if
        one is still there after `timeout`, drop the finalizers of what is left."""
        core = client.CoreV1Api(self.admin)
        for ns in self.namespaces:
            ns.delete()

        def gone() -> bool:
            names = {n.metadata.name for n in core.list_namespace().items}
            return not any(ns.name in names for ns in self.namespaces)

        try:
            wait_for(gone, timeout=timeout, what="chaos namespaces gone", interval=2)
        except AssertionError:
            for ns in self.namespaces:
                with contextlib.suppress(Exception):
                    for obj in list_all(self.admin, ns.name, "toolinvocations"):
                        custom(self.admin).patch_namespaced_custom_object(
                            GROUP,
                            VERSION,
                            ns.name,
                            "toolinvocations",
                            obj["metadata"]["name"],
                            {"metadata": {"finalizers": None}},
                        )
            self.result["warnings"].append(
                "namespaces needed their invocations' finalizers dropped"
            )
