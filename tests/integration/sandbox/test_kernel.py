"""Issue 29: a kernel boundary and git in the sandbox, on the real cluster, as an agent.

`sandbox.kind: GVisor` maps to the RuntimeClass `gvisor` (TOOLADAPTER_RUNTIME_CLASSES),
which the local cluster provides (hack/cluster/addons/gvisor.sh: containerd's runsc
runtime, systrap platform). A tool in it talks to gVisor's Sentry, not to the node's
kernel: the kernel it reports is the Sentry's. The same command in a `Container`
sandbox (runc) reports the node's kernel, so the comparison can fail.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from kubernetes import client

from tests.integration.objects import SHELL_SCHEMA, Agent, descriptor, jobs_of, pretty, status_of
from tooladapter.devtools import Namespace

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]


def kernel_tool(
    api: client.ApiClient, namespace: str, tool_id: str, kind: str, allow: list[str]
) -> dict[str, Any]:
    """A shell tool whose sandbox is of `kind` (Container: the node's default runtime)."""
    return descriptor(
        api,
        namespace,
        tool_id,
        kind="shell",
        side_effect_class="sandbox",
        inputSchema=SHELL_SCHEMA,
        timeoutSeconds=90,
        shell={"allow": allow},
        sandbox={
            "kind": kind,
            "resources": {
                "requests": {"cpu": "50m", "memory": "64Mi"},
                "limits": {"cpu": "500m", "memory": "64Mi"},
            },
            "egress": {"allow": []},
        },
    )


def observed_output(agent: Agent, tool: str, command: str) -> tuple[dict[str, Any], str]:
    name = agent.invoke(tool, {"command": command})
    status = status_of(agent.wait(name, timeout=180))
    assert status["state"] == "Observed", pretty(status)
    return status, str(status["result"]["content"]).strip()


def node_kernel(api: client.ApiClient) -> str:
    nodes = client.CoreV1Api(api).list_node().items
    assert len(nodes) == 1, [n.metadata.name for n in nodes]
    return str(nodes[0].status.node_info.kernel_version)


def test_a_gvisor_shell_tool_reports_a_guest_kernel_other_than_the_nodes(
    api: client.ApiClient, ns: Namespace, agent: Agent
) -> None:
    kernel_tool(api, ns.name, "uname-gvisor", "GVisor", ["uname", "cat /proc/version"])
    kernel_tool(api, ns.name, "uname-runc", "Container", ["uname"])
    agent.grant(["uname-gvisor", "uname-runc"], ["sandbox"])
    node = node_kernel(api)

    runc_status, runc_release = observed_output(agent, "uname-runc", "uname -r")
    gvisor_status, gvisor_release = observed_output(agent, "uname-gvisor", "uname -r")
    _, gvisor_version = observed_output(agent, "uname-gvisor", "cat /proc/version")

    # The control: under runc the tool sees the node's own kernel.
    assert runc_release == node
    assert runc_status["sandboxLease"].get("runtimeClass") is None, pretty(runc_status)
    # Under gVisor it sees the Sentry's, in uname(2) and in /proc alike.
    assert gvisor_status["sandboxLease"]["runtimeClass"] == "gvisor", pretty(gvisor_status)
    assert gvisor_release and gvisor_release != node, (gvisor_release, node)
    assert gvisor_version.startswith(f"Linux version {gvisor_release} "), gvisor_version
    assert node not in gvisor_version
    classes = {
        job.metadata.name: job.spec.template.spec.runtime_class_name
        for job in jobs_of(api, ns.name)
    }
    assert Counter(classes.values()) == Counter({"gvisor": 2, None: 1}), classes


def test_git_runs_in_the_default_sandbox(
    api: client.ApiClient, ns: Namespace, agent: Agent
) -> None:
    kernel_tool(api, ns.name, "git", "Container", ["git --version"])
    agent.grant(["git"], ["sandbox"])

    status, out = observed_output(agent, "git", "git --version")

    assert out.startswith("git version 2."), out
    assert status["sandboxLease"].get("runtimeClass") is None, pretty(status)
