"""Issues 43 and 44: interrupting a call from the command line, on the real cluster, as an
agent runs it (a kubeconfig holding only its ServiceAccount token):

- `tooladapter interrupt NAME -n NS` stops a running sandboxed call (the caller's own; not
  another agent's), and says so once the call has ended;
- Ctrl-C on `tooladapter invoke --wait`: on a terminal it asks; `y` interrupts; a second
  Ctrl-C leaves the call running and says how to stop it; without a terminal,
  `--interrupt-on-exit` interrupts on the first Ctrl-C.
"""

from __future__ import annotations

import os
import pty
import re
import select
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from kubernetes import client

from tests.integration.cli.test_cli import Cli, explain
from tests.integration.flow.test_trust import running_pod
from tests.integration.objects import Agent, get, pretty, shell_tool, status_of
from tooladapter.devtools import Namespace, OperatorProcess, unique, wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(900)]

#: Exit codes of a call interrupted while its tool ran: Cancelled 6, Uncertain 5.
SETTLED_CODES = {5: "Uncertain", 6: "Cancelled"}


@pytest.fixture
def long_tool(api: client.ApiClient, ns: Namespace, agent: Agent) -> str:
    shell_tool(api, ns.name, "long", timeout=300)
    agent.grant(["long"], ["sandbox"])
    return "long"


def _state(api: client.ApiClient, namespace: str, name: str) -> str | None:
    obj = get(api, namespace, "toolinvocations", name)
    return str((obj.get("status") or {}).get("state") or "") or None


class Terminal:
    """`python -m tooladapter ...` with stdin and stderr on a pseudo-terminal (stdout piped),
    as a person at a terminal runs it."""

    def __init__(self, cli: Cli, *args: str) -> None:
        self.master, slave = pty.openpty()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tooladapter", *args],
            env=cli.env(),
            stdin=slave,
            stdout=subprocess.PIPE,
            stderr=slave,
            text=True,
        )
        os.close(slave)
        self.seen = ""

    def until(self, pattern: str, timeout: float = 240) -> str:
        """What the terminal shows, once it shows `pattern` (a regex)."""
        found = re.compile(pattern)
        while not found.search(self.seen):
            ready, _, _ = select.select([self.master], [], [], timeout)
            assert ready, f"no {pattern!r} within {timeout}s; the terminal shows:\n{self.seen}"
            try:
                chunk = os.read(self.master, 4096)
            except OSError:  # the process ended and closed the terminal
                chunk = b""
            assert chunk, f"the terminal closed before {pattern!r}:\n{self.seen}"
            self.seen += chunk.decode(errors="replace")
        return self.seen

    def type(self, text: str) -> None:
        os.write(self.master, text.encode())

    def ctrl_c(self) -> None:
        self.proc.send_signal(signal.SIGINT)

    def wait(self, timeout: float = 240) -> int:
        code = self.proc.wait(timeout=timeout)
        try:  # what it wrote last
            while select.select([self.master], [], [], 0.5)[0]:
                chunk = os.read(self.master, 4096)
                if not chunk:
                    break
                self.seen += chunk.decode(errors="replace")
        except OSError:
            pass
        os.close(self.master)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        return code


def _started(api: client.ApiClient, namespace: str, name: str) -> None:
    wait_for(lambda: running_pod(api, namespace, name), timeout=240, what="pod running")


def test_the_cli_interrupts_a_running_sandboxed_call_of_its_caller_only(
    api: client.ApiClient,
    ns: Namespace,
    agent: Agent,
    operator: OperatorProcess,
    long_tool: str,
    tmp_path: Path,
) -> None:
    cli = Cli(tmp_path, api, agent)
    other = Cli(tmp_path, api, Agent.create(api, ns.name, "agent-2"))
    done = cli("invoke", long_tool, "--arg", "command=sleep 300", "--no-wait")
    assert done.returncode == 0, explain(done)
    name = done.stdout.strip()
    _started(api, ns.name, name)

    refused = other("interrupt", name, "-n", ns.name)
    assert refused.returncode == 9, explain(refused)  # FORBIDDEN: admission said no
    assert _state(api, ns.name, name) == "Executing"

    stopped = cli("interrupt", name, "-n", ns.name)
    assert stopped.returncode in SETTLED_CODES, explain(stopped)
    assert "interrupt requested" in stopped.stderr, explain(stopped)
    assert _state(api, ns.name, name) == SETTLED_CODES[stopped.returncode]

    again = cli("interrupt", name, "-n", ns.name)
    assert again.returncode == 1 and "already ended" in again.stderr, explain(again)


def test_ctrl_c_on_invoke_asks_and_yes_interrupts_the_call(
    api: client.ApiClient,
    ns: Namespace,
    agent: Agent,
    operator: OperatorProcess,
    long_tool: str,
    tmp_path: Path,
) -> None:
    name = unique("ctrl-c-yes")
    args = ("invoke", long_tool, "--name", name, "--arg", "command=sleep 300")
    term = Terminal(Cli(tmp_path, api, agent), *args)
    term.until("state: Executing")
    _started(api, ns.name, name)
    term.ctrl_c()
    term.until(r"interrupt .*\? \[y/N\]")
    term.type("y\n")
    code = term.wait()
    assert code in SETTLED_CODES, f"exit {code}\n{term.seen}"
    assert "interrupt requested" in term.seen, term.seen
    ended = status_of(get(api, ns.name, "toolinvocations", name))
    assert ended["state"] == SETTLED_CODES[code], pretty(ended)


def test_a_second_ctrl_c_leaves_the_call_running_and_says_so(
    api: client.ApiClient,
    ns: Namespace,
    agent: Agent,
    operator: OperatorProcess,
    long_tool: str,
    tmp_path: Path,
) -> None:
    cli = Cli(tmp_path, api, agent)
    name = unique("ctrl-c-twice")
    term = Terminal(cli, "invoke", long_tool, "--name", name, "--arg", "command=sleep 300")
    term.until("state: Executing")
    _started(api, ns.name, name)
    term.ctrl_c()
    term.until(r"\[y/N\]")
    term.ctrl_c()
    code = term.wait()
    assert code == 7, f"exit {code}\n{term.seen}"  # PENDING: the call goes on
    assert f"the call keeps running: tooladapter interrupt {name} -n {ns.name}" in term.seen
    assert _state(api, ns.name, name) == "Executing"
    assert not (get(api, ns.name, "toolinvocations", name).get("spec") or {}).get("interrupt")
    # What it said to run stops it.
    stopped = cli("interrupt", name, "-n", ns.name)
    assert stopped.returncode in SETTLED_CODES, explain(stopped)


def test_interrupt_on_exit_interrupts_on_the_first_ctrl_c_without_a_terminal(
    api: client.ApiClient,
    ns: Namespace,
    agent: Agent,
    operator: OperatorProcess,
    long_tool: str,
    tmp_path: Path,
) -> None:
    name = unique("on-exit")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tooladapter",
            "invoke",
            long_tool,
            "--name",
            name,
            "--arg",
            "command=sleep 300",
            "--interrupt-on-exit",
        ],
        env=Cli(tmp_path, api, agent).env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        seen = ""
        for line in proc.stderr:  # not a terminal: one plain line per state
            seen += line
            if "state: Executing" in line:
                break
        _started(api, ns.name, name)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
    seen += err
    assert proc.returncode in SETTLED_CODES, f"exit {proc.returncode}\n{seen}\n{out}"
    assert "interrupt requested" in seen and "[y/N]" not in seen, seen
    ended = status_of(get(api, ns.name, "toolinvocations", name))
    assert ended["state"] == SETTLED_CODES[proc.returncode], pretty(ended)
