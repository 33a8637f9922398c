"""The reviewers' page's settings: how its sign-ins are sealed and how long they last."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tooladapter.settings import environ as env


@dataclass(frozen=True)
class PageSettings:
    """The reviewers' page (`tooladapter.gateway.ui`), served by the gateway."""

    #: A file of at least 32 random bytes sealing the reviewers' page session cookies
    #: (every replica behind one Service needs the same); unset: a key per process.
    session_key_file: Path | None = None
    #: `namespace/name` of a Secret holding that key (key `session-key`), which the gateway
    #: creates with a random key when it is absent (the chart's way: a rendered chart holds
    #: no key, so `helm template | kubectl apply` never rotates it). Wins over the file.
    session_secret: str | None = None
    #: How long a sign-in to the reviewers' page lasts (the token's own expiry still ends it).
    session_seconds: int = 8 * 3600
    #: A trusted TLS-terminating proxy is in front of a plain-HTTP gateway: the page's
    #: cookies are `Secure` and `__Host-` prefixed as when the gateway speaks TLS itself.
    behind_tls_proxy: bool = False

    @classmethod
    def from_env(cls) -> PageSettings:
        base = cls()
        return cls(
            session_key_file=env.path("TOOLADAPTER_UI_SESSION_KEY_FILE"),
            session_secret=env.namespaced("TOOLADAPTER_UI_SESSION_SECRET"),
            session_seconds=env.at_least(
                "TOOLADAPTER_UI_SESSION_SECONDS", base.session_seconds, 60
            ),
            behind_tls_proxy=env.boolean("TOOLADAPTER_UI_BEHIND_TLS_PROXY", base.behind_tls_proxy),
        )
