"""Where the integration events of the outbox go (`tooladapter.outbox`), and how."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tooladapter.settings import environ as env
from tooladapter.settings.variables import FromEnv, setting


@dataclass(frozen=True)
class EventSinkSettings(FromEnv):
    """The integration events' sink: CloudEvents POSTed from the outbox."""

    #: URL the reference's integration events are POSTed to as CloudEvents 1.0 (structured
    #: mode), at least once, from the outbox in the artifact store; unset: none are sent.
    url: str | None = setting("TOOLADAPTER_EVENT_SINK", env.endpoint, None)
    #: The events' `source` prefix (`<prefix>/namespaces/<namespace>`).
    source: str = setting("TOOLADAPTER_EVENT_SOURCE", env.stripped, "/tooladapter")
    #: A CA bundle (PEM file) the event sink's TLS certificate must chain to; unset: the
    #: system's.
    ca_file: Path | None = setting("TOOLADAPTER_EVENT_SINK_CA_FILE", env.path, None)
    #: A file holding the bearer token sent to the event sink (a mounted Secret; read at
    #: each delivery round, never logged); unset: no Authorization header.
    token_file: Path | None = setting("TOOLADAPTER_EVENT_SINK_TOKEN_FILE", env.path, None)
