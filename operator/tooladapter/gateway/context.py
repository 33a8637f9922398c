"""What every gateway handler shares: the process's dependencies and the request's caller."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

from aiohttp import web

from tooladapter.artifacts import ArtifactStore
from tooladapter.gateway.doors import Doors
from tooladapter.kube.callers import AsCaller, CallerIdentity, CallerPool, Reviews
from tooladapter.kube.client import Kube
from tooladapter.pipeline.dataflow import PendingLabels
from tooladapter.pipeline.validation.shipped import AdmissionGuard
from tooladapter.settings import Settings
from tooladapter.settings.live import LiveSettings


@dataclass(frozen=True)
class Deps:
    """Built once per gateway: the operator's reviews, the credential-less pool callers'
    requests go through, the artifact store and the settings; `kube`, the operator's own
    client, only reads what a dry run needs and callers cannot read themselves (tenant
    policies, namespace labels, MCP discovery)."""

    reviews: Reviews
    pool: CallerPool
    store: ArtifactStore
    settings: Settings
    kube: Kube
    #: What each caller and namespace holds at once (requests, streams, follows).
    doors: Doors = field(default_factory=Doors)
    #: The reviewers' page session key read (or made) from `settings.page.session_secret`;
    #: None: `settings.page.session_key_file`, else a key of this process.
    ui_session_key: bytes | None = None
    #: The operator's verdict on the admission policies (`identity`): the runtime of this
    #: process shares it (never compared on a standby); the page says when calls are
    #: refused `admission-missing`.
    admission: AdmissionGuard = field(default_factory=AdmissionGuard)
    #: The settings in force, shared with the runtime of this process (None: `settings`
    #: stay as started). Reloadable values are read through `in_force()` at use time.
    live: LiveSettings | None = None
    #: Data-flow labels of ended calls whose write is pending (`flow.dataflow`), shared
    #: with the runtime of this process: a dry run counts them as the call's gate does.
    pending_labels: PendingLabels = field(default_factory=PendingLabels)

    def in_force(self) -> Settings:
        """The settings in force now (the reloadable ones as last applied)."""
        return self.live.current if self.live is not None else self.settings


@dataclass(frozen=True)
class Caller:
    """The authenticated caller of one request and a client that speaks as it."""

    identity: CallerIdentity
    api: AsCaller


DEPS: Final = web.AppKey("tooladapter.deps", Deps)
_CALLER: Final = web.RequestKey("tooladapter.caller", Caller)


def deps_of(request: web.Request) -> Deps:
    return request.app[DEPS]


def caller_of(request: web.Request) -> Caller:
    caller = request.get(_CALLER)
    assert isinstance(caller, Caller), "the authentication middleware sets the caller"
    return caller


def set_caller(request: web.Request, caller: Caller) -> None:
    request[_CALLER] = caller
