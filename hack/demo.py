"""`make demo`: publish three tools, grant them to an agent, call them as that agent with
kubectl, and print the receipts.

It runs against the cluster of KUBECONFIG (the Makefile brings the local one up first),
starts the operator exactly as `make run` does, and leaves the namespace in place so you
can `kubectl get toolinvocations -n tooladapter-demo` afterwards.
"""

from __future__ import annotations

import http.server
import json
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from kubernetes import client

from tooladapter import GROUP, VERSION
from tooladapter.devtools import (
    EgressProxyProcess,
    OperatorProcess,
    admin_client,
    free_port,
    node_ip,
    token_for,
    wait_for,
)

ROOT = Path(__file__).resolve().parent.parent
NS = "tooladapter-demo"
AGENT = "demo-agent"
#: The weather server's name for the sandbox: the egress proxy maps it to this node.
WEATHER_HOST = "weather.example.test"


def kubectl(*args: str, stdin: str | None = None, kubeconfig: str | None = None) -> str:
    cmd = ["kubectl", *(["--kubeconfig", kubeconfig] if kubeconfig else []), *args]
    done = subprocess.run(cmd, input=stdin, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        # The command line may hold a path to credentials, never the credentials themselves.
        raise SystemExit(f"kubectl {args[0]} failed: {done.stderr.strip()}")
    return done.stdout


def agent_kubeconfig(api: client.ApiClient, token: str, directory: Path) -> str:
    """A kubeconfig holding only the agent's token: kubectl then speaks as the agent."""
    cfg = api.configuration
    path = directory / "agent.kubeconfig"
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "agent",
                "clusters": [
                    {
                        "name": "c",
                        "cluster": {"server": cfg.host, "certificate-authority": cfg.ssl_ca_cert},
                    }
                ],
                "users": [{"name": "agent", "user": {"token": token}}],
                "contexts": [{"name": "agent", "context": {"cluster": "c", "user": "agent"}}],
            }
        )
    )
    path.chmod(0o600)
    return str(path)


class Hello(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = json.dumps({"weather": "sunny", "city": self.path.rsplit("/", 1)[-1]}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def apply(obj: dict[str, object]) -> None:
    kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", stdin=json.dumps(obj))


def main() -> None:
    api = admin_client()
    host = node_ip()
    server = http.server.ThreadingHTTPServer((host, free_port(host)), Hello)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]

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
    tools = [
        {
            "toolId": "list-tools",
            "kind": "native",
            "sideEffectClass": "read",
            "description": "Tools I may call",
            "native": {"name": "list-tools"},
        },
        {
            "toolId": "shell",
            "kind": "shell",
            "sideEffectClass": "sandbox",
            "description": "A POSIX command in a locked-down sandbox",
            "inputSchema": {
                "type": "object",
                "properties": {"command": {"type": "string"}},
                "required": ["command"],
            },
            "timeoutSeconds": 60,
            "sandbox": {"resources": {"limits": {"cpu": "500m", "memory": "64Mi"}}},
            # Only listed commands run as sandbox class; any other waits for an approval.
            "shell": {"allow": ["uname", "echo", "ls", "cat"]},
        },
        {
            "toolId": "fetch",
            "kind": "shell",
            "sideEffectClass": "sandbox",
            "description": "wget in a sandbox that may reach one host, by name",
            "inputSchema": {
                "type": "object",
                "properties": {"command": {"type": "string"}},
                "required": ["command"],
            },
            "timeoutSeconds": 60,
            "sandbox": {
                "resources": {"limits": {"cpu": "500m", "memory": "64Mi"}},
                # A host name: the pod reaches it only through the egress proxy.
                "egress": {"allow": [f"{WEATHER_HOST}:{port}"]},
            },
            "shell": {"allow": ["wget"]},
        },
        {
            "toolId": "weather",
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
    ]
    for spec in tools:
        apply(
            {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": "ToolDescriptor",
                "metadata": {"name": spec["toolId"], "namespace": NS},
                "spec": {"version": "1.0.0", **spec},
            }
        )
    apply(
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": AGENT, "namespace": NS}}
    )
    kubectl("apply", "-n", NS, "-f", str(ROOT / "hack" / "examples" / "demo-grants.yaml"))
    token = token_for(api, NS, AGENT)

    with tempfile.TemporaryDirectory() as tmp:
        agent_config = agent_kubeconfig(api, token, Path(tmp))
        # The egress proxy beside the operator, as `make run` starts them on a host.
        proxy = EgressProxyProcess(
            Path(tmp) / "proxy",
            {"TOOLADAPTER_NAMESPACES": NS, "TOOLADAPTER_EGRESS_HOSTS": f"{WEATHER_HOST}={host}"},
        )
        (Path(tmp) / "proxy").mkdir()
        proxy.start()
        op = OperatorProcess(
            Path(tmp),
            {"TOOLADAPTER_NAMESPACES": NS, "TOOLADAPTER_EGRESS_PROXY_PORT": str(proxy.port)},
        )
        op.start()
        try:
            wait_for(
                lambda: all(
                    (
                        client.CustomObjectsApi(api)
                        .get_namespaced_custom_object(
                            GROUP, VERSION, NS, "tooldescriptors", t["toolId"]
                        )
                        .get("status")
                        or {}
                    ).get("active")
                    for t in tools
                ),
                timeout=60,
                what="tools active",
            )
            user = f"system:serviceaccount:{NS}:{AGENT}"
            calls = {
                "list-tools": {},
                "shell": {"command": "uname -a"},
                "weather": {"city": "Lisbon"},
                "fetch": {"command": f"wget -q -O - http://{WEATHER_HOST}:{port}/weather/Porto"},
            }
            names = {}
            for tool, args in calls.items():
                manifest = {
                    "apiVersion": f"{GROUP}/{VERSION}",
                    "kind": "ToolInvocation",
                    "metadata": {"generateName": f"demo-{tool}-", "namespace": NS},
                    "spec": {
                        "tool": {"id": tool, "version": "1.0.0"},
                        "arguments": args,
                        "caller": {"kind": "agent", "name": user},
                    },
                }
                out = kubectl(
                    "create",
                    "-o",
                    "name",
                    "-f",
                    "-",
                    stdin=json.dumps(manifest),
                    kubeconfig=agent_config,
                )
                names[tool] = out.strip().split("/")[-1]
                print(f"agent created {out.strip()}")
            for tool, name in names.items():

                def ended(name: str = name) -> dict[str, object] | None:
                    obj = json.loads(
                        kubectl(
                            "get",
                            "-n",
                            NS,
                            "toolinvocation",
                            name,
                            "-o",
                            "json",
                            kubeconfig=agent_config,
                        )
                    )
                    state = (obj.get("status") or {}).get("state")
                    return (
                        obj
                        if state in {"Observed", "Failed", "Denied", "Uncertain", "Cancelled"}
                        else None
                    )

                obj = wait_for(ended, timeout=180, what=f"{tool} call to end")
                status = obj["status"]
                digest = status["receiptRef"].split(":")[1]
                receipt = json.loads((op.artifacts / "sha256" / digest[:2] / digest).read_text())
                print(f"\n=== {tool}: {status['state']} ===")
                print("result:", (status.get("result") or {}).get("content", "")[:300].strip())
                print("receipt", status["receiptRef"])
                print(json.dumps(receipt, indent=2))
            print()
            print(kubectl("get", "toolinvocations", "-n", NS))
        finally:
            op.stop()
            proxy.stop()
            server.shutdown()
    time.sleep(0)


if __name__ == "__main__":
    main()
