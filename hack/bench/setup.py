"""Set-up and clean-up: namespace, floor CRD, agents with tokens and grants, the helper
processes, the operator, the published tools."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
from typing import IO, Any

from kubernetes import client

from tooladapter import GROUP, VERSION
from tooladapter.devtools import OperatorProcess, free_port, sa_user, token_for, wait_for

from . import floor
from .api import Api
from .base import AgentClient, BenchBase
from .config import BENCH_GROUP, FLOOR_CRD, FLOOR_PLURAL, HACK


def helper(*args: str, log: IO[bytes]) -> subprocess.Popen[bytes]:
    """`python -m bench ARGS` in a session of its own, importable however this process was
    started (hack/ first on its PYTHONPATH)."""
    path = os.pathsep.join(p for p in (str(HACK), os.environ.get("PYTHONPATH")) if p)
    return subprocess.Popen(
        [sys.executable, "-m", str(__package__), *args],
        env={**os.environ, "PYTHONPATH": path},
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


class Setup(BenchBase):
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
        self.kubectl_apply(floor.crd())
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
        self.procs.append(helper("http-server", self.host, str(self.http_port), log=http_log))
        floor_log = (self.workdir / "floor-controller.log").open("ab")
        self.floor_proc = helper("floor-controller", self.ns, log=floor_log)
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
                # Only listed commands run as sandbox class without an approval.
                "shell": {"allow": ["echo"]},
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
