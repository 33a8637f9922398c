"""The settings ConfigMap merged over the environment (`settings.reload`, `settings.live`):
which keys apply, which are refused and which are only reported."""

from __future__ import annotations

import pytest

from tests.unit.fake_cluster import make_runtime
from tooladapter.pipeline.shell.allow import DEFAULT_ALLOW_LIST
from tooladapter.pipeline.shell.block import DEFAULT_BLOCK_LIST
from tooladapter.reloading import report
from tooladapter.settings import LimitSettings, Settings
from tooladapter.settings.live import LiveSettings
from tooladapter.settings.reload import reload, reloadable_variables

MAX = "TOOLADAPTER_MAX_RESULT_BYTES"
BLOCK = "TOOLADAPTER_SHELL_BLOCK_LIST"


def test_the_references_five_options_are_reloadable_and_start_up_ones_are_not() -> None:
    names = set(reloadable_variables())
    assert {
        "TOOLADAPTER_DEFAULT_TIMEOUT_SECONDS",
        MAX,
        "TOOLADAPTER_SHELL_ALLOW_LIST",
        BLOCK,
        "TOOLADAPTER_DEFAULT_EGRESS_ALLOW",
    } <= names
    assert "TOOLADAPTER_METRICS_PORT" not in names
    assert "TOOLADAPTER_SETTINGS_CONFIGMAP" not in names


def test_the_shell_lists_default_to_the_references_constants() -> None:
    settings = Settings()
    assert settings.shell.allow_list == DEFAULT_ALLOW_LIST
    assert settings.shell.block_list == DEFAULT_BLOCK_LIST


def test_the_shell_lists_are_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(BLOCK, "rm -rf, git push --force")
    assert Settings.from_env().shell.block_list == ("rm -rf", "git push --force")


def test_a_reloadable_key_applies_over_the_environments_value() -> None:
    base = Settings()
    done = reload(base=base, previous=base, data={MAX: "2048", BLOCK: "rm -rf,shutdown"})
    assert done.settings.limits.max_result_bytes == 2048
    assert done.settings.shell.block_list == ("rm -rf", "shutdown")
    assert set(done.changed) == {MAX, BLOCK}
    assert not done.rejected and not done.not_reloadable and not done.unknown
    # Everything else stays as the environment set it.
    assert done.settings.limits.inline_result_bytes == base.limits.inline_result_bytes


def test_a_value_that_does_not_parse_keeps_the_one_in_force_not_the_default() -> None:
    live = LiveSettings(Settings())
    live.apply({MAX: "2048"})
    done = live.apply({MAX: "two kilobytes"})
    assert live.current.limits.max_result_bytes == 2048
    (rejected,) = done.rejected
    assert rejected.key == MAX and "not an integer" in rejected.reason
    assert done.changed == ()


@pytest.mark.parametrize("raw", ["0", "-5"])
def test_a_bound_below_its_minimum_is_refused(raw: str) -> None:
    base = Settings()
    done = reload(base=base, previous=base, data={MAX: raw})
    assert done.rejected and done.settings.limits.max_result_bytes == base.limits.max_result_bytes


def test_a_key_removed_falls_back_to_the_environments_value() -> None:
    base = Settings(limits=LimitSettings(max_result_bytes=4096))
    live = LiveSettings(base)
    live.apply({MAX: "100"})
    done = live.apply({})
    assert live.current.limits.max_result_bytes == 4096
    assert done.changed == (MAX,)


def test_keys_read_only_at_start_up_and_unknown_keys_are_reported_never_applied() -> None:
    base = Settings()
    done = reload(
        base=base,
        previous=base,
        data={"TOOLADAPTER_METRICS_PORT": "1", "TOOLADAPTER_NO_SUCH": "x"},
    )
    assert done.settings == base
    assert done.not_reloadable == ("TOOLADAPTER_METRICS_PORT",)
    assert done.unknown == ("TOOLADAPTER_NO_SUCH",)


def test_an_empty_list_is_an_empty_list() -> None:
    base = Settings()
    done = reload(base=base, previous=base, data={"TOOLADAPTER_DEFAULT_EGRESS_ALLOW": ""})
    assert done.settings.egress.default_allow == ()


def test_the_runtime_reads_the_settings_in_force_at_use_time() -> None:
    h = make_runtime()
    h.rt.live.apply({MAX: "123"})
    assert h.rt.settings.limits.max_result_bytes == 123


def test_a_rejected_value_is_said_as_a_warning_naming_the_key_and_value() -> None:
    base = Settings()
    done = reload(base=base, previous=base, data={MAX: "lots", "TOOLADAPTER_METRICS_PORT": "1"})
    notes = {n.reason: n for n in report(done, {MAX: "lots", "TOOLADAPTER_METRICS_PORT": "1"})}
    rejected = notes["SettingRejected"]
    assert rejected.warning and MAX in rejected.message and "'lots'" in rejected.message
    assert "stays" in rejected.message
    assert "TOOLADAPTER_METRICS_PORT" in notes["SettingNotReloadable"].message
    assert "SettingsApplied" not in notes
