"""The reloadable settings on the real cluster: a change to the settings ConfigMap applies
without a restart, a value that does not parse keeps the one in force (and says so on the
ConfigMap), and an approved call whose default egress list widened since its approval is
Denied at the re-check. The operator reads a ConfigMap this module owns
(`TOOLADAPTER_SETTINGS_CONFIGMAP`), so no other test's operator sees these changes."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest
from kubernetes import client

from tests.integration.conftest import Configured
from tests.integration.objects import (
    Agent,
    approve,
    descriptor,
    jobs_of,
    pretty,
    shell_tool,
    status_of,
)
from tooladapter.devtools import SESSION, Namespace, wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(420)]

NAME = "tooladapter-settings"
MAX = "TOOLADAPTER_MAX_RESULT_BYTES"
BLOCK = "TOOLADAPTER_SHELL_BLOCK_LIST"
EGRESS = "TOOLADAPTER_DEFAULT_EGRESS_ALLOW"


@pytest.fixture(scope="module")
def home(api: client.ApiClient) -> Iterator[Namespace]:
    """Where the settings ConfigMap lives: outside every operator's served scope."""
    namespace = Namespace(api, prefix=f"{SESSION}settings")
    client.CoreV1Api(api).create_namespaced_config_map(
        namespace.name,
        {"metadata": {"name": NAME}, "data": {}},  # type: ignore[arg-type]
    )
    yield namespace
    namespace.delete()


@pytest.fixture(scope="module")
def reloading(
    api: client.ApiClient,
    home: Namespace,
    configured: Callable[[Mapping[str, str]], Configured],
) -> Configured:
    return configured({"TOOLADAPTER_SETTINGS_CONFIGMAP": f"{home.name}/{NAME}"})


class SettingsMap:
    """The module's settings ConfigMap, and the Events the operator posts on it."""

    def __init__(self, api: client.ApiClient, namespace: str) -> None:
        self.core = client.CoreV1Api(api)
        self.namespace = namespace

    def events(self, reason: str) -> list[str]:
        found = self.core.list_namespaced_event(
            self.namespace, field_selector=f"involvedObject.name={NAME}"
        ).items
        return [str(e.message) for e in found if e.reason == reason]

    def set(self, data: dict[str, str], *, expect: str, about: str) -> str:
        """Replace the data; return the message of the new `expect` Event naming `about`
        (the operator's word that it read this change)."""
        seen = len([m for m in self.events(expect) if about in m])
        self.core.patch_namespaced_config_map(
            NAME,
            self.namespace,
            [{"op": "replace", "path": "/data", "value": data}],
        )

        def posted() -> str | None:
            mine = [m for m in self.events(expect) if about in m]
            return mine[-1] if len(mine) > seen else None

        return wait_for(posted, timeout=60, what=f"{expect} Event naming {about}")


def tools_result(agent: Agent) -> dict[str, Any]:
    done = status_of(agent.wait(agent.invoke("list-tools", {})))
    assert done["state"] == "Observed", pretty(done)
    return dict(done["result"])


def test_max_result_bytes_and_a_block_list_entry_apply_without_a_restart(
    api: client.ApiClient, home: Namespace, reloading: Configured
) -> None:
    ns = reloading.namespace(api)
    agent = Agent.create(api, ns.name, "agent-1")
    descriptor(api, ns.name, "list-tools", kind="native", native={"name": "list-tools"})
    shell_tool(api, ns.name, "sh", shell={"allow": ["echo"]})
    agent.grant(["list-tools", "sh"], ["read", "sandbox"])
    settings = SettingsMap(api, home.name)
    # Each test sets values of its own, so each change is a change whatever ran before.
    settings.set({MAX: "1048575"}, expect="SettingsApplied", about=MAX)
    assert not tools_result(agent).get("truncated"), "a 1 MiB bound truncated a small list"

    starts = reloading.operator.starts
    settings.set({MAX: "64"}, expect="SettingsApplied", about=MAX)
    assert tools_result(agent).get("truncated") is True

    settings.set({MAX: "64", BLOCK: "rm -rf,echo"}, expect="SettingsApplied", about=BLOCK)
    blocked = status_of(agent.wait(agent.invoke("sh", {"command": "echo hello"})))
    assert blocked["state"] == "Denied", pretty(blocked)
    assert "block" in blocked["message"] and "echo" in blocked["message"], blocked["message"]
    assert jobs_of(api, ns.name) == []
    # The same process all along: nothing restarted it.
    proc = reloading.operator.proc
    assert reloading.operator.starts == starts and proc is not None and proc.poll() is None


def test_a_value_that_does_not_parse_keeps_the_previous_one_and_says_so(
    api: client.ApiClient, home: Namespace, reloading: Configured
) -> None:
    ns = reloading.namespace(api)
    agent = Agent.create(api, ns.name, "agent-1")
    descriptor(api, ns.name, "list-tools", kind="native", native={"name": "list-tools"})
    agent.grant(["list-tools"], ["read"])
    settings = SettingsMap(api, home.name)
    settings.set({MAX: "65"}, expect="SettingsApplied", about=MAX)

    said = settings.set(
        {MAX: "sixty-four", "TOOLADAPTER_METRICS_PORT": "1"}, expect="SettingRejected", about=MAX
    )
    assert "'sixty-four'" in said and "stays" in said, said
    ignored = wait_for(
        lambda: [m for m in settings.events("SettingNotReloadable") if "METRICS_PORT" in m],
        timeout=30,
        what="the start-up-only key reported",
    )
    assert "start-up" in ignored[-1]
    # Still 65, not the default: a value that does not parse never widens a bound.
    assert tools_result(agent).get("truncated") is True
    assert reloading.operator.says("does not parse")


def test_a_default_egress_list_widened_after_the_approval_denies_the_call_at_the_recheck(
    api: client.ApiClient, home: Namespace, reloading: Configured
) -> None:
    ns = reloading.namespace(api)
    agent = Agent.create(api, ns.name, "agent-1")
    reviewer = Agent.create(api, ns.name, "reviewer", role="tooladapter-reviewer")
    # No egress of its own: the operator's default list applies to its sandbox.
    descriptor(
        api,
        ns.name,
        "sh",
        kind="shell",
        side_effect_class="sandbox",
        inputSchema={
            "type": "object",
            "properties": {"command": {"type": "string"}},
            "required": ["command"],
        },
        timeoutSeconds=60,
        sandbox={"resources": {"limits": {"cpu": "500m", "memory": "64Mi"}}},
        shell={"allow": ["echo"]},
    )
    agent.grant(["sh"], ["sandbox", "shared-write"])
    settings = SettingsMap(api, home.name)
    settings.set({EGRESS: "github.com"}, expect="SettingsApplied", about=EGRESS)

    # On no allow entry: it waits for a reviewer, with the lists in force pinned.
    call = agent.invoke("sh", {"command": "ls /"})
    waiting = status_of(agent.wait(call, states={"AwaitingApproval", "Denied", "Failed"}))
    assert waiting["state"] == "AwaitingApproval", pretty(waiting)
    assert waiting["approvedLists"]["egressAllow"] == ["github.com"], pretty(waiting)

    settings.set({EGRESS: "github.com,exfil.example"}, expect="SettingsApplied", about=EGRESS)
    approve(reviewer, call)
    done = status_of(agent.wait(call))
    assert done["state"] == "Denied" and done["deniedStage"] == "approval", pretty(done)
    assert "exfil.example" in done["message"], done["message"]
    assert done["approval"]["listsDigest"] == waiting["approvedLists"]["digest"]
    assert jobs_of(api, ns.name) == []
