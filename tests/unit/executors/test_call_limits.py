"""A call's limits (`CallLimits`): derived once from the descriptor and the settings."""

from __future__ import annotations

from dataclasses import FrozenInstanceError

import pytest

from tooladapter.executors.limits import CallLimits
from tooladapter.model import ToolDescriptorSpec
from tooladapter.pipeline.effect import command_argv
from tooladapter.settings import Settings
from tooladapter.settings.limits import LimitSettings

SETTINGS = Settings(limits=LimitSettings(default_timeout_seconds=30, max_result_bytes=64 * 1024))


def shell(**spec: object) -> ToolDescriptorSpec:
    return ToolDescriptorSpec.model_validate(
        {"toolId": "sh", "version": "1.0.0", "kind": "shell", "sideEffectClass": "read", **spec}
    )


def test_a_descriptor_sets_its_timeout_and_a_bound_below_the_operators() -> None:
    limits = CallLimits.of(shell(timeoutSeconds=7, maxResultBytes=4096), SETTINGS)
    assert limits == CallLimits(timeout_seconds=7, max_result_bytes=4096)


def test_the_operator_bounds_every_result_and_defaults_the_timeout() -> None:
    limits = CallLimits.of(shell(maxResultBytes=1_048_576), SETTINGS)
    assert limits == CallLimits(timeout_seconds=30, max_result_bytes=64 * 1024)


def test_a_descriptor_without_a_bound_follows_the_operators_even_above_one_mebibyte() -> None:
    raised = Settings(limits=LimitSettings(max_result_bytes=8 * 1_048_576))
    assert shell().max_result_bytes is None  # no default of its own any more
    assert CallLimits.of(shell(), raised).max_result_bytes == 8 * 1_048_576


def test_a_call_without_its_descriptor_gets_the_operators_limits() -> None:
    assert CallLimits.of(None, SETTINGS) == CallLimits(30, 64 * 1024)


def test_limits_are_a_value() -> None:
    limits = CallLimits.of(None, SETTINGS)
    with pytest.raises(FrozenInstanceError):
        limits.timeout_seconds = 1  # type: ignore[misc]


def test_a_shell_command_is_parsed_into_argv_never_run_by_a_shell() -> None:
    assert command_argv(shell(), {"command": "echo 'a; b'"}) == ["echo", "a; b"]
    assert command_argv(shell(shell={"useShell": True}), {"command": "echo $X"}) == [
        "/bin/sh",
        "-c",
        "echo $X",
    ]
