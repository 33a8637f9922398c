"""The quick start (docs/getting-started/quickstart.md) runs as written.

Every ```sh block of the page, in order, in one bash (`set -euo pipefail`) in a scratch
directory, against this test's namespace (`NS`) and the session operator's gateway
(`GATEWAY`); a block after `<!-- quickstart-test: skip ... -->` is left out. Then what the
page promises is checked on the objects: so the page that teaches cannot drift from what
works.
"""

from __future__ import annotations

import os
import re
import subprocess
import textwrap
from pathlib import Path
from typing import Any, cast

import pytest
from kubernetes import client

from tooladapter.devtools import Namespace, OperatorProcess, kubeconfig

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(600)]

ROOT = Path(__file__).resolve().parents[3]
PAGE = ROOT / "docs" / "getting-started" / "quickstart.md"
SKIP = "<!-- quickstart-test: skip"
FENCE = re.compile(
    r"^(?P<indent>[ \t]*)```(?P<info>[^\n`]*)\n(?P<body>.*?)^(?P=indent)```[ \t]*$", re.M | re.S
)


def shell_blocks(text: str) -> list[str]:
    """The page's ```sh blocks in order (dedented: a block may sit in an admonition), but
    those right after a skip marker."""
    blocks = []
    for found in FENCE.finditer(text):
        if found["info"].strip().split(" ")[0] != "sh":
            continue
        before = text[: found.start()].rstrip().splitlines()
        if before and before[-1].strip().startswith(SKIP):
            continue
        blocks.append(textwrap.dedent(found["body"]))
    return blocks


def test_the_page_has_the_steps_it_promises() -> None:
    blocks = shell_blocks(PAGE.read_text())
    script = "\n".join(blocks)
    for step in (
        "kind: ToolDescriptor",
        "tooladapter-requester",
        "invoke shell",
        "tooladapter approve",
        "/ui/approvals/",
        "receipt verify",
        "confirm slow",
    ):
        assert step in script, step
    assert not any("delete namespace" in block for block in blocks)
    # The tokens' files are written outside the checkout, by default in the home directory;
    # and were the page run inside one, git would leave them out.
    assert blocks[0].count('cd "$QUICKSTART_DIR"') == 1, blocks[0]
    assert "QUICKSTART_DIR:-$HOME/" in blocks[0], blocks[0]
    ignored = subprocess.run(
        ["git", "-C", str(ROOT), "check-ignore", "-q", "docs/agent-1.kubeconfig"], check=False
    )
    assert ignored.returncode == 0, "a checkout's .gitignore must cover *.kubeconfig"


def _invocation(api: client.ApiClient, namespace: str, name: str) -> dict[str, Any]:
    return cast(
        dict[str, Any],
        client.CustomObjectsApi(api).get_namespaced_custom_object(
            "tooladapter.dev", "v1alpha1", namespace, "toolinvocations", name
        ),
    )


def test_the_quick_start_runs_as_written(
    api: client.ApiClient, ns: Namespace, operator: OperatorProcess, tmp_path: Path
) -> None:
    script = "set -euo pipefail\n" + "\n".join(shell_blocks(PAGE.read_text()))
    (tmp_path / "quickstart.sh").write_text(script)
    path = os.pathsep.join(
        [str(ROOT / ".venv" / "bin"), str(ROOT / ".cluster" / "bin"), os.environ.get("PATH", "")]
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLADAPTER_")}
    env.update(
        NS=ns.name,
        GATEWAY=operator.gateway_url,
        KUBECONFIG=kubeconfig(),
        PATH=path,
        QUICKSTART_DIR=str(tmp_path / "work"),
    )
    done = subprocess.run(
        ["bash", str(tmp_path / "quickstart.sh")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=540,
        check=False,
    )
    output = f"--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}"
    assert done.returncode == 0, output

    # 5: the agent's call ran and said hello.
    hello = _invocation(api, ns.name, "hello")["status"]
    assert hello["state"] == "Observed", hello
    assert "hello" in done.stdout
    # 7: the reviewer without a role was told which one to bind; then approved `report`.
    assert "exit code 9" in done.stdout, output
    assert "--clusterrole=tooladapter-reviewer" in done.stderr, output
    report = _invocation(api, ns.name, "report")["status"]
    assert report["state"] == "Observed", report
    assert report["effectiveClass"] == "shared-write"
    # 8: the page's approval bound as the CLI's did.
    today = _invocation(api, ns.name, "today")["status"]
    assert today["state"] == "Observed", today
    assert today["approval"]["reviewer"] == f"system:serviceaccount:{ns.name}:reviewer-1"
    # 9: the receipt was fetched and verified.
    assert (tmp_path / "work" / "hello.receipt.json").stat().st_size > 0
    # 10: Uncertain, the operations role named on the 403, then confirmed.
    assert "--clusterrole=tooladapter-operations" in done.stderr, output
    slow = _invocation(api, ns.name, "slow")["status"]
    assert slow["state"] == "Uncertain", slow
    assert slow["failureClass"] == "effect-did-not-happen", slow
    # 2: the identities' tokens are in their own files, readable by their owner alone,
    # and none of them went into the admin's kubeconfig.
    # They are in the page's working directory ($QUICKSTART_DIR), nowhere else.
    assert not list(tmp_path.glob("*.kubeconfig")), sorted(tmp_path.iterdir())
    for who in ("agent-1", "reviewer-1", "oncall-1"):
        file = tmp_path / "work" / f"{who}.kubeconfig"
        assert file.stat().st_mode & 0o077 == 0, who
        assert who not in Path(kubeconfig()).read_text()
