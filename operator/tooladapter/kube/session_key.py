"""The reviewers' page session key, kept in a Secret the operator makes itself.

Every replica must seal sessions with the same key, and the key must survive restarts and
upgrades, yet a chart rendered by `helm template` (GitOps) cannot keep a random value: each
render would make a new one. So the chart only names the Secret
(TOOLADAPTER_UI_SESSION_SECRET=namespace/name) and the first replica to start creates it
with a random key; the others, and every later start, read it. Two replicas racing to
create it both end with the winner's key (the loser's create is refused, it reads again).
The Secret is never rotated here: delete it to end every session (the next start makes a
new one).
"""

from __future__ import annotations

import base64
import secrets
from typing import Final

from tooladapter.kube.client import Kube
from tooladapter.kube.errors import api_errors
from tooladapter.kube.made_once import read_or_create

KEY: Final = "session-key"
#: Hex of 32 random bytes: 64 characters, more than the 32 the page needs.
_RANDOM_BYTES: Final = 32


def _decoded(data: dict[str, str] | None, where: str) -> bytes:
    raw = (data or {}).get(KEY)
    if not raw:
        raise ValueError(f"Secret {where} has no key {KEY!r}")
    return base64.b64decode(raw).strip()


async def ensure_session_key(kube: Kube, namespace: str, name: str) -> bytes:
    """The key in Secret namespace/name (key `session-key`), created when absent."""
    where = f"{namespace}/{name}"

    async def read() -> bytes:
        with api_errors():
            secret = await kube.core.read_namespaced_secret(name, namespace)
        return _decoded(secret.data, where)

    async def create() -> bytes:
        key = secrets.token_hex(_RANDOM_BYTES)
        body = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "labels": {
                    "app.kubernetes.io/part-of": "tooladapter",
                    "app.kubernetes.io/component": "ui-session",
                },
            },
            "type": "Opaque",
            "stringData": {KEY: key},
        }
        with api_errors():
            await kube.core.create_namespaced_secret(namespace, body)
        return key.encode()

    return await read_or_create(read, create, where=f"Secret {where}")
