"""The reviewers' page's settings: how its sign-ins are sealed and how long they last."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tooladapter.settings import environ as env
from tooladapter.settings.variables import FromEnv, setting


@dataclass(frozen=True)
class PageSettings(FromEnv):
    """The reviewers' page (`tooladapter.gateway.ui`), served by the gateway."""

    #: A file of at least 32 random bytes sealing the reviewers' page session cookies
    #: (every replica behind one Service needs the same); unset: a key per process.
    session_key_file: Path | None = setting("TOOLADAPTER_UI_SESSION_KEY_FILE", env.path, None)
    #: `namespace/name` of a Secret holding that key (key `session-key`), which the gateway
    #: creates with a random key when it is absent (the chart's way: a rendered chart holds
    #: no key, so `helm template | kubectl apply` never rotates it). Wins over the file.
    session_secret: str | None = setting("TOOLADAPTER_UI_SESSION_SECRET", env.namespaced, None)
    #: How long a sign-in to the reviewers' page lasts (the token's own expiry still ends it).
    session_seconds: int = setting("TOOLADAPTER_UI_SESSION_SECONDS", env.at_least(60), 8 * 3600)
    #: A trusted TLS-terminating proxy is in front of a plain-HTTP gateway: the page's
    #: cookies are `Secure` and `__Host-` prefixed as when the gateway speaks TLS itself.
    behind_tls_proxy: bool = setting("TOOLADAPTER_UI_BEHIND_TLS_PROXY", env.boolean, False)
