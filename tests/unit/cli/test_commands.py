"""The command line's wiring without a cluster: usage errors, global options, `run`,
completion and how errors become exit codes."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import click
import pytest

from tooladapter import cli
from tooladapter.cli.context import Settings, common_options
from tooladapter.cli.exitcodes import CliError, ExitCode
from tooladapter.kube.errors import UserApiError


def exit_of(argv: list[str]) -> int:
    with pytest.raises(SystemExit) as done:
        cli.main(argv)
    return int(done.value.code or 0)


@pytest.mark.parametrize(
    "argv",
    [
        ["no-such-command"],
        ["invoke"],
        ["invoke", "t", "--timeout", "0"],
        ["-o", "xml", "tools"],
        ["confirm", "x", "--evidence", "e"],  # neither --happened nor --did-not-happen
        ["receipts"],
        ["completion", "tcsh"],
    ],
)
def test_usage_errors_exit_2_before_touching_the_cluster(argv: list[str]) -> None:
    assert exit_of(argv) == ExitCode.USAGE


def test_help_lists_every_command() -> None:
    names = set(cli.app.list_commands(click.Context(cli.app)))
    assert names >= {
        "tools",
        "describe",
        "invoke",
        "dry-run",
        "approvals",
        "approve",
        "reject",
        "confirm",
        "receipts",
        "receipt",
        "completion",
        "run",
    }
    assert exit_of(["--help"]) == 0


def test_global_options_work_before_and_after_the_command_and_the_later_wins() -> None:
    seen: dict[str, Any] = {}

    @click.group()
    @common_options
    def group() -> None:
        pass

    @group.command()
    @common_options
    @click.pass_obj
    def show(settings: Settings) -> None:
        seen.update(vars(settings))

    group.main(
        ["-n", "a", "--context", "c", "show", "-n", "b", "-o", "json"], standalone_mode=False
    )
    assert seen["namespace"] == "b" and seen["context"] == "c" and seen["output"] == "json"


def test_run_hands_kopf_its_options(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[list[str]] = []
    import tooladapter.launcher

    monkeypatch.setattr(tooladapter.launcher, "run", calls.append)
    assert exit_of(["run", "--", "--verbose", "--log-format=json"]) == 0
    assert calls == [["--verbose", "--log-format=json"]]


@pytest.mark.parametrize("shell", ["bash", "zsh"])
def test_completion_scripts_name_the_program(
    shell: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert exit_of(["completion", shell]) == 0
    script = capsys.readouterr().out
    assert "_TOOLADAPTER_COMPLETE" in script and f"{shell}_complete" in script


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (UserApiError(403, "forbidden"), ExitCode.FORBIDDEN),
        (UserApiError(404, "not found"), ExitCode.NOT_FOUND),
        (UserApiError(0, "kubeconfig: none"), ExitCode.ERROR),
        (CliError("still waiting", ExitCode.PENDING), ExitCode.PENDING),
        (ConnectionRefusedError("refused"), ExitCode.ERROR),
    ],
)
def test_errors_become_documented_exit_codes(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    error: Exception,
    code: ExitCode,
) -> None:
    def failing(coro: Any) -> Any:
        coro.close()  # never awaited: the command fails before it reaches the cluster
        raise error

    raising: Callable[..., Any] = failing
    # (the package's `tools` attribute is the command; the module is in sys.modules)
    monkeypatch.setattr(sys.modules["tooladapter.cli.tools"], "run_async", raising)
    assert exit_of(["tools"]) == code
    assert capsys.readouterr().err.startswith("error: ")


@pytest.mark.parametrize("text", ["", "just: words\n", "[1, 2]\n"])
async def test_an_empty_or_malformed_kubeconfig_is_one_clear_error(
    tmp_path: Any, text: str
) -> None:
    from tooladapter.kube.user import connect

    path = tmp_path / "config"
    path.write_text(text)
    with pytest.raises(UserApiError) as caught:
        async with connect(kubeconfig=str(path)):
            pass
    assert str(path) in str(caught.value)
