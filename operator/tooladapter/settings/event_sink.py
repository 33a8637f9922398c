"""Where the integration events of the outbox go (`tooladapter.outbox`), and how."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from tooladapter.settings import environ as env


@dataclass(frozen=True)
class EventSinkSettings:
    """The integration events' sink: CloudEvents POSTed from the outbox."""

    #: URL the reference's integration events are POSTed to as CloudEvents 1.0 (structured
    #: mode), at least once, from the outbox in the artifact store; unset: none are sent.
    url: str | None = None
    #: The events' `source` prefix (`<prefix>/namespaces/<namespace>`).
    source: str = "/tooladapter"
    #: A CA bundle (PEM file) the event sink's TLS certificate must chain to; unset: the
    #: system's.
    ca_file: Path | None = None
    #: A file holding the bearer token sent to the event sink (a mounted Secret; read at
    #: each delivery round, never logged); unset: no Authorization header.
    token_file: Path | None = None

    @classmethod
    def from_env(cls) -> EventSinkSettings:
        base = cls()
        return cls(
            url=env.endpoint("TOOLADAPTER_EVENT_SINK"),
            source=os.environ.get("TOOLADAPTER_EVENT_SOURCE", "").strip() or base.source,
            ca_file=env.path("TOOLADAPTER_EVENT_SINK_CA_FILE"),
            token_file=env.path("TOOLADAPTER_EVENT_SINK_TOKEN_FILE"),
        )
