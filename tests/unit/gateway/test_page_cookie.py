"""The reviewers' page cookies: `__Host-` prefixed, Secure and for path `/` whenever the page
is served over TLS (by the gateway itself or a trusted TLS proxy in front); plain otherwise
(the host-process tests' loopback HTTP)."""

from __future__ import annotations

import pytest

from tooladapter.gateway.ui.web import cookie_name, cookie_path
from tooladapter.settings import Settings


def test_a_secure_cookie_takes_the_host_prefix_and_the_root_path() -> None:
    assert cookie_name(True, "tooladapter_session") == "__Host-tooladapter_session"
    assert cookie_path(True) == "/"
    assert cookie_name(False, "tooladapter_session") == "tooladapter_session"
    assert cookie_path(False) == "/ui"


def test_a_trusted_tls_proxy_is_a_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    assert Settings.from_env().page.behind_tls_proxy is False
    monkeypatch.setenv("TOOLADAPTER_UI_BEHIND_TLS_PROXY", "true")
    assert Settings.from_env().page.behind_tls_proxy is True
