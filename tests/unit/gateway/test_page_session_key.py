"""The reviewers' page session key in a Secret the gateway makes on first start: the chart
names it only, so `helm template | kubectl apply` never rotates it."""

from __future__ import annotations

import base64
import json
from types import SimpleNamespace
from typing import Any, cast

import pytest
from kubernetes_asyncio.client.exceptions import ApiException

from tooladapter.gateway.ui.session import Sealer
from tooladapter.kube.client import Kube
from tooladapter.kube.session_key import KEY, ensure_session_key
from tooladapter.settings import Settings


def _error(status: int, reason: str = "") -> ApiException:
    exc = ApiException(status=status, reason=reason)
    exc.body = json.dumps({"reason": reason})  # type: ignore[assignment]  # str, as kube.client sets it
    return exc


class FakeCore:
    """Secrets by (namespace, name); `race` makes one other replica create it first."""

    def __init__(self, race: bool = False) -> None:
        self.secrets: dict[tuple[str, str], dict[str, Any]] = {}
        self.creates = 0
        self.race = race

    async def read_namespaced_secret(self, name: str, namespace: str) -> Any:
        found = self.secrets.get((namespace, name))
        if found is None:
            raise _error(404, "NotFound")
        return SimpleNamespace(data=found["data"])

    async def create_namespaced_secret(self, namespace: str, body: dict[str, Any]) -> Any:
        self.creates += 1
        name = body["metadata"]["name"]
        if self.race:
            self.race = False
            self._store(namespace, name, b"theirs-" + b"k" * 40)
            raise _error(409, "AlreadyExists")
        if (namespace, name) in self.secrets:
            raise _error(409, "AlreadyExists")
        self._store(namespace, name, body["stringData"][KEY].encode())
        return SimpleNamespace(data=self.secrets[(namespace, name)]["data"])

    def _store(self, namespace: str, name: str, key: bytes) -> None:
        self.secrets[(namespace, name)] = {"data": {KEY: base64.b64encode(key).decode()}}


def _kube(core: FakeCore) -> Kube:
    return cast(Kube, SimpleNamespace(core=core))


async def test_the_first_start_makes_the_key_and_later_starts_read_the_same() -> None:
    core = FakeCore()
    first = await ensure_session_key(_kube(core), "ta", "ta-ui-session")
    assert len(first) >= 32
    Sealer(first)  # long enough to seal with
    again = await ensure_session_key(_kube(core), "ta", "ta-ui-session")
    assert again == first
    assert core.creates == 1


async def test_a_replica_that_loses_the_race_takes_the_winners_key() -> None:
    core = FakeCore(race=True)
    key = await ensure_session_key(_kube(core), "ta", "ta-ui-session")
    assert key == b"theirs-" + b"k" * 40


async def test_an_existing_secret_without_the_key_is_an_error_naming_it() -> None:
    core = FakeCore()
    core.secrets[("ta", "mine")] = {"data": {"other": "eA=="}}
    with pytest.raises(ValueError, match="ta/mine has no key 'session-key'"):
        await ensure_session_key(_kube(core), "ta", "mine")


def test_the_setting_is_namespace_and_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOOLADAPTER_UI_SESSION_SECRET", "tooladapter-system/ui")
    assert Settings.from_env().page.session_secret == "tooladapter-system/ui"
    monkeypatch.setenv("TOOLADAPTER_UI_SESSION_SECRET", "ui")
    with pytest.raises(ValueError, match="namespace/name"):
        Settings.from_env()
