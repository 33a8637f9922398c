"""`make demo`: one screenful of what tooladapter does with an agent's tool calls.

It runs against the cluster of KUBECONFIG (the Makefile brings the local one up first),
recreates the namespace `tooladapter-demo` with a few tools and grants, starts the operator
as `make run` does (or uses one that already serves the namespace), and tells six calls:
allowed, denied at permission, denied by policy, approved by a reviewer with the CLI, over
MCP, and out through the egress proxy by host name. Receipts stay in `.demo/artifacts`
(gitignored) after it ends, so the printed `tooladapter receipt` commands keep working.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.server
import json
import os
import shlex
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx2
import yaml
from kubernetes import client
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tooladapter import GROUP, VERSION
from tooladapter.devtools import (
    EgressProxyProcess,
    OperatorProcess,
    admin_client,
    free_port,
    kubeconfig,
    node_ip,
    token_for,
    wait_for,
)
from tooladapter.kube.leases import lease_name

ROOT = Path(__file__).resolve().parent.parent
NS = "tooladapter-demo"
AGENT, REVIEWER = "demo-agent", "demo-reviewer"
#: Kept after the demo (gitignored): receipts, logs, the kubeconfigs of the agent and reviewer.
WORK = ROOT / ".demo"
#: The gateway of the operator the demo starts: a fixed port, so a second run finds it.
GATEWAY_PORT = int(os.environ.get("TOOLADAPTER_DEMO_GATEWAY_PORT", "8780"))
LEASE_NAMESPACE = os.environ.get("TOOLADAPTER_LEASE_NAMESPACE", "tooladapter-system")
#: The weather server's name for the sandbox: the egress proxy maps it to this node.
WEATHER_HOST = "weather.example.test"
KINDS = ("toolinvocations", "toolapprovals", "tooldescriptors", "toolpolicies", "mcpservers")


def say(title: str, line: str = "") -> None:
    print(f"\n{title}" + (f"\n    {line}" if line else ""))


class Weather(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = json.dumps({"weather": "sunny", "city": self.path.rsplit("/", 1)[-1]}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def kubectl(*args: str, stdin: str | None = None) -> str:
    done = subprocess.run(
        ["kubectl", *args], input=stdin, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise SystemExit(f"kubectl {args[0]} failed: {done.stderr.strip()}")
    return done.stdout


def apply(obj: dict[str, Any]) -> None:
    kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", stdin=json.dumps(obj))


def custom(kind: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": kind,
        "metadata": {"name": name, "namespace": NS},
        "spec": spec,
    }


# --- who serves the namespace -------------------------------------------------------------


def lease_live(api: client.ApiClient, name: str) -> bool:
    """Whether a live holder leads this scope: a holder whose renewal has not expired."""
    try:
        lease = client.CoordinationV1Api(api).read_namespaced_lease(name, LEASE_NAMESPACE)
    except client.ApiException:
        return False
    spec = lease.spec
    if spec is None:
        return False
    renewed = spec.renew_time or spec.acquire_time
    if not spec.holder_identity or renewed is None:
        return False
    return bool(datetime.now(UTC) < renewed + timedelta(seconds=spec.lease_duration_seconds or 15))


def gateway_answers(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as r:
            return bool(r.status == 200)
    except OSError:
        return False


def running_operator(api: client.ApiClient) -> tuple[str, str | None] | None:
    """(lease, gateway URL) of an operator already serving the demo namespace, or None."""
    for lease in (lease_name([NS]), lease_name([])):
        if lease_live(api, lease):
            port = next((p for p in (GATEWAY_PORT, 8080) if gateway_answers(p)), None)
            return lease, f"http://127.0.0.1:{port}" if port else None
    return None


@contextlib.contextmanager
def operator(api: client.ApiClient, host: str) -> Iterator[tuple[str | None, Path | None]]:
    """(gateway URL, artifact dir) of the operator serving NS: an already running one, else
    one started here (with its egress proxy) and stopped on the way out."""
    found = running_operator(api)
    if found is not None:
        lease, url = found
        print(f"Using the operator that already serves {NS} (Lease {LEASE_NAMESPACE}/{lease}).")
        yield url, None
        return
    WORK.mkdir(exist_ok=True)
    scope = {"TOOLADAPTER_NAMESPACES": NS}
    proxy = EgressProxyProcess(
        WORK, {**scope, "TOOLADAPTER_EGRESS_HOSTS": f"{WEATHER_HOST}={host}"}
    )
    port = GATEWAY_PORT if not gateway_answers(GATEWAY_PORT) else free_port()
    op = OperatorProcess(
        WORK,
        {
            **scope,
            "TOOLADAPTER_EGRESS_PROXY_PORT": str(proxy.port),
            "TOOLADAPTER_GATEWAY_PORT": str(port),
        },
    )
    proxy.start()
    try:
        op.start()
        print(f"Started an operator for {NS} (log {rel(op.log_path)}) and its egress proxy.")
        yield op.gateway_url, op.artifacts
    finally:
        op.stop()
        proxy.stop()


def rel(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


# --- a clean namespace, tools, grants, people ---------------------------------------------


def recreate_namespace(api: client.ApiClient, served: bool) -> None:
    core = client.CoreV1Api(api)
    try:
        core.delete_namespace(NS)
    except client.ApiException as exc:
        if exc.status != 404:
            raise
    else:
        if not served:
            # No operator to release its finalizers: the namespace would stay Terminating.
            objects: Any = client.CustomObjectsApi(api)
            for kind in KINDS:
                for obj in objects.list_namespaced_custom_object(GROUP, VERSION, NS, kind)["items"]:
                    with contextlib.suppress(client.ApiException):
                        objects.patch_namespaced_custom_object(
                            GROUP,
                            VERSION,
                            NS,
                            kind,
                            obj["metadata"]["name"],
                            {"metadata": {"finalizers": None}},
                        )

        def gone() -> bool:
            try:
                core.read_namespace(NS)
            except client.ApiException as exc:
                return bool(exc.status == 404)
            return False

        wait_for(gone, timeout=180, what=f"namespace {NS} deleted")
    apply(
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {
                "name": NS,
                "labels": {"tooladapter.dev/environment-class": "development"},
            },
        }
    )


def publish(host: str, port: int) -> list[str]:
    """The tools, the agent's and people's grants, one tenant policy; returns the tool ids."""
    command = {
        "type": "object",
        "properties": {"command": {"type": "string"}},
        "required": ["command"],
    }
    limits = {"resources": {"limits": {"cpu": "500m", "memory": "64Mi"}}}
    tools: dict[str, dict[str, Any]] = {
        "weather": {
            "kind": "http",
            "sideEffectClass": "read",
            "description": "Weather of a city (a server on this node)",
            "inputSchema": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
            "http": {
                "method": "GET",
                "url": f"http://{host}:{port}/weather/{{city}}",
                "allowedHosts": [f"{host}:{port}"],
            },
        },
        # Published, but not granted to the agent: the permission stage denies it.
        "payroll": {
            "kind": "native",
            "sideEffectClass": "read",
            "description": "Everyone's salary",
            "native": {"name": "list-tools"},
        },
        "shell": {
            "kind": "shell",
            "sideEffectClass": "sandbox",
            "description": "A POSIX command in a locked-down sandbox",
            "inputSchema": command,
            "timeoutSeconds": 60,
            "sandbox": limits,
            # Listed commands run as sandbox class; any other waits for an approval.
            "shell": {"allow": ["uname", "echo", "ls", "cat"]},
        },
        "fetch": {
            "kind": "shell",
            "sideEffectClass": "sandbox",
            "description": "wget in a sandbox that may reach one host, by name",
            "inputSchema": command,
            "timeoutSeconds": 60,
            # A host name: the pod reaches it only through the egress proxy.
            "sandbox": {**limits, "egress": {"allow": [f"{WEATHER_HOST}:{port}"]}},
            "shell": {"allow": ["wget"]},
        },
        "list-tools": {
            "kind": "native",
            "sideEffectClass": "read",
            "description": "Tools I may call",
            "native": {"name": "list-tools"},
        },
    }
    for tool_id, spec in tools.items():
        apply(custom("ToolDescriptor", tool_id, {"toolId": tool_id, "version": "1.0.0", **spec}))
    condition = {
        "tool": "weather",
        "path": "/city",
        "operator": "in",
        "value": ["Atlantis"],
        "effect": "deny",
        "reason": "no forecasts for sunken cities",
    }
    apply(custom("ToolPolicy", "demo", {"conditions": [condition]}))
    apply(
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": AGENT, "namespace": NS}}
    )
    kubectl("apply", "-n", NS, "-f", str(ROOT / "hack" / "examples" / "demo-grants.yaml"))
    return list(tools)


def user_kubeconfig(api: client.ApiClient, sa: str) -> Path:
    """A kubeconfig holding only the ServiceAccount's token (mode 0600; never printed)."""
    admin = yaml.safe_load(Path(kubeconfig()).read_text())
    current = next(c for c in admin["contexts"] if c["name"] == admin["current-context"])
    cluster = next(c for c in admin["clusters"] if c["name"] == current["context"]["cluster"])
    path = WORK / f"{sa}.kubeconfig"
    path.touch(mode=0o600)
    path.chmod(0o600)
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [cluster],
                "users": [{"name": sa, "user": {"token": token_for(api, NS, sa)}}],
                "contexts": [
                    {
                        "name": sa,
                        "context": {"cluster": cluster["name"], "user": sa, "namespace": NS},
                    }
                ],
                "current-context": sa,
            }
        )
    )
    return path


# --- the calls ----------------------------------------------------------------------------


def cli(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`tooladapter ARGS` as the user of `config` (nothing of the operator's settings)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLADAPTER_")}
    return subprocess.run(
        [sys.executable, "-m", "tooladapter", *args],
        env={**env, "KUBECONFIG": str(config)},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def invoke(agent: Path, tool: str, *args: str) -> dict[str, Any]:
    done = cli(agent, "invoke", tool, *args, "--run-id", "demo", "-o", "json")
    if not done.stdout.strip():
        raise SystemExit(f"tooladapter invoke {tool} failed: {done.stderr.strip()}")
    return dict(json.loads(done.stdout))


def one_line(out: dict[str, Any]) -> str:
    if out.get("state") == "Observed":
        result = out.get("result") or {}
        text = result.get("content") or json.dumps(result.get("structuredContent"))
        return clip(f"Observed: {' '.join(str(text).split())}", 150)
    stage = f" at {out['deniedStage']}" if out.get("deniedStage") else ""
    return clip(f"{out.get('state')}{stage}: {out.get('message') or out.get('failureClass')}", 160)


def show(command: list[str], done: subprocess.CompletedProcess[str], keep: tuple[str, ...]) -> None:
    """The command and the lines of its output that start with one of `keep`."""
    print(f"    $ {shlex.join(command)}")
    for line in (done.stdout or done.stderr).strip().splitlines():
        if line.lstrip().startswith(keep):
            print(f"      {clip(line.strip(), 100)}")


def clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def gated_call(agent: Path, reviewer: Path) -> dict[str, Any]:
    command = "date -u +%F"
    done = cli(
        agent, "invoke", "shell", "--arg", f"command={command}", "--run-id", "demo", "--no-wait"
    )
    name = done.stdout.strip()
    if done.returncode != 0 or not name:
        raise SystemExit(f"tooladapter invoke shell failed: {done.stderr.strip()}")
    print(f"    agent: tooladapter invoke shell --arg command='{command}' --no-wait -> {name}")

    def waiting() -> bool:
        listed = cli(reviewer, "approvals", "-o", "json")
        return listed.returncode == 0 and name in listed.stdout

    wait_for(waiting, timeout=120, what=f"{name} awaiting approval")
    show(["tooladapter", "approvals"], cli(reviewer, "approvals"), ("Invocation", "Class", "Arg"))
    approve = ["approve", name, "--comment", "reads the clock"]
    show(["tooladapter", *approve], cli(reviewer, *approve), (name,))
    return invoke_wait(agent, name)


def invoke_wait(agent: Path, name: str) -> dict[str, Any]:
    """The call's status once it has ended, as the agent reads it."""
    ended = {"Observed", "Failed", "Denied", "Uncertain", "Cancelled"}

    def status() -> dict[str, Any] | None:
        got = kubectl("--kubeconfig", str(agent), "get", "ti", "-n", NS, name, "-o", "json")
        current = json.loads(got).get("status") or {}
        return dict(current) if current.get("state") in ended else None

    return wait_for(status, timeout=180, what=f"{name} to end")


async def over_mcp(url: str, token: str) -> tuple[list[str], Any]:
    http = httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {token}"}, timeout=httpx2.Timeout(120), trust_env=False
    )
    async with (
        http,
        Client(streamable_http_client(url, http_client=http), mode="auto", cache=None) as mcp,
    ):
        tools = [t.name for t in (await mcp.list_tools()).tools]
        result = await mcp.call_tool("weather", {"city": "Porto"})
    return tools, result


def mcp_step(api: client.ApiClient, gateway: str | None) -> str | None:
    if gateway is None:
        say("5. Over MCP", "skipped: no gateway answers (set TOOLADAPTER_DEMO_GATEWAY_PORT)")
        return None
    url = f"{gateway}/namespaces/{NS}/mcp"
    tools, result = asyncio.run(over_mcp(url, token_for(api, NS, AGENT)))
    meta = dict(result.meta or {})
    text = " ".join(getattr(block, "text", "") for block in result.content)
    say(f"5. Over MCP ({url}), the mcp SDK client with the agent's token")
    print(f"    tools/list: {', '.join(tools)}")
    print(f"    tools/call weather Porto -> {meta.get('dev.tooladapter/state')}: {text[:80]}")
    return str(meta.get("dev.tooladapter/receiptRef") or "") or None


def write_mcp_json(url: str) -> Path:
    path = WORK / "mcp.json"
    server = {
        "type": "http",
        "url": url,
        "headers": {"Authorization": "Bearer ${TOOLADAPTER_TOKEN}"},
    }
    path.write_text(json.dumps({"mcpServers": {"tooladapter-demo": server}}, indent=2) + "\n")
    return path


def main() -> None:
    api = admin_client()
    host = node_ip()
    server = http.server.ThreadingHTTPServer((host, free_port(host)), Weather)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = int(server.server_address[1])
    WORK.mkdir(exist_ok=True)

    print(f"tooladapter demo: namespace {NS}, agent {AGENT}, reviewer {REVIEWER}")
    recreate_namespace(api, served=running_operator(api) is not None)
    tools = publish(host, port)
    agent, reviewer = user_kubeconfig(api, AGENT), user_kubeconfig(api, REVIEWER)
    with operator(api, host) as (gateway, artifacts):
        objects: Any = client.CustomObjectsApi(api)
        wait_for(
            lambda: all(
                (
                    objects.get_namespaced_custom_object(
                        GROUP, VERSION, NS, "tooldescriptors", t
                    ).get("status")
                    or {}
                ).get("active")
                for t in tools
            ),
            timeout=60,
            what="tools active",
        )
        print(f"Published {', '.join(tools)}; the agent may call all but payroll.")

        allowed = invoke(agent, "weather", "--arg", "city=Lisbon")
        say("1. Allowed: tooladapter invoke weather --arg city=Lisbon", one_line(allowed))
        say("2. Not granted: tooladapter invoke payroll", one_line(invoke(agent, "payroll")))
        denied = invoke(agent, "weather", "--arg", "city=Atlantis")
        say("3. Tenant policy: tooladapter invoke weather --arg city=Atlantis", one_line(denied))
        say("4. Gated: an unlisted shell command waits for a reviewer, who uses the CLI")
        print(f"    {one_line(gated_call(agent, reviewer))}")
        mcp_step(api, gateway)
        url = f"http://{WEATHER_HOST}:{port}/weather/Porto"
        fetched = invoke(agent, "fetch", "--arg", f"command=wget -q -O - {url}")
        say(f"6. Egress by host name: wget {url} in a sandbox", one_line(fetched))
        if artifacts is None and fetched.get("state") != "Observed":
            print(
                "    (that operator's egress proxy needs"
                f" TOOLADAPTER_EGRESS_HOSTS={WEATHER_HOST}={host})"
            )

    ref = str(allowed.get("receiptRef"))
    store = f"--artifact-dir {rel(artifacts)}" if artifacts else f"--gateway {gateway}"
    # The demo's own operator has stopped: point at `make run`'s gateway, or the running one.
    base = gateway if artifacts is None and gateway else "http://127.0.0.1:8080"
    run_url = f"{base}/namespaces/{NS}/mcp"
    print("\nReceipts: every call has one; `tooladapter receipts --run demo` lists them. Call 1's:")
    print(f"    receiptRef {ref}")
    print(f"    KUBECONFIG={rel(agent)} tooladapter receipt get {ref} {store}")
    print(f"    KUBECONFIG={rel(agent)} tooladapter receipt verify {ref} {store}")
    print(f"MCP: {run_url} once an operator serves it, e.g.")
    print(f"    TOOLADAPTER_NAMESPACES={NS} make run   (make demo then uses it, too)")
    print(f"    client config {rel(write_mcp_json(run_url))} with the token from")
    print(f"    export TOOLADAPTER_TOKEN=$(kubectl create token -n {NS} {AGENT})")
    print(f"Next: as the agent (KUBECONFIG={rel(agent)}) `tooladapter tools`,")
    print("    `tooladapter dry-run shell --arg command=id`; as the reviewer")
    print(f"    (KUBECONFIG={rel(reviewer)}) `tooladapter approvals`; `kubectl get ti -n {NS}`.")
    server.shutdown()


if __name__ == "__main__":
    main()
