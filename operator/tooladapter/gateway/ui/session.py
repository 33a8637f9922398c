"""The reviewers' page session: the person's own token, sealed in a cookie.

The gateway keeps no state, so the session travels with the browser: the bearer token the
person signed in with, the namespaces they chose and an expiry, encrypted and
authenticated with AES-256-GCM (a cookie that was changed or sealed with another key
does not open). Every request re-reviews the token (TokenReview, cached briefly), so a
revoked or expired token ends the session whatever the cookie says, and every read and
write is made with that token.

CSRF: each session has a random id; a form carries HMAC(key, id), which a page of another
origin cannot read or compute. Sign-in itself (no session yet) is a double submit: a random
nonce in a SameSite=Strict cookie and in the form.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

logger = logging.getLogger("tooladapter.gateway")

#: Browsers keep cookies up to 4096 bytes; the sealed token must fit.
MAX_TOKEN_CHARS: Final = 2800
MIN_KEY_BYTES: Final = 32
#: Bound to this purpose and format: a value sealed for anything else does not open.
_AAD: Final = b"tooladapter-ui-session-v1"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode("ascii").rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


@dataclass(frozen=True)
class Session:
    """One signed-in person: their token, the namespaces they look at (empty: every
    namespace they may list), when the sign-in ends (epoch seconds) and its random id."""

    token: str
    namespaces: tuple[str, ...]
    expires: float
    sid: str


class Sealer:
    """Seals and opens sessions, and makes and checks their CSRF tokens."""

    def __init__(self, key: bytes) -> None:
        if len(key) < MIN_KEY_BYTES:
            raise ValueError(f"the session key must have at least {MIN_KEY_BYTES} bytes")
        # Two keys from one secret, one per use.
        self._aead = AESGCM(hashlib.sha256(b"seal:" + key).digest())
        self._mac = hashlib.sha256(b"csrf:" + key).digest()

    @classmethod
    def from_file(cls, path: Path | None) -> Sealer:
        if path is None:
            logger.info(
                "reviewers' page: sessions are sealed with a key of this process (they end "
                "when it stops); set TOOLADAPTER_UI_SESSION_KEY_FILE to share one among replicas"
            )
            return cls(os.urandom(MIN_KEY_BYTES))
        key = path.read_bytes().strip()
        if len(key) < MIN_KEY_BYTES:
            raise ValueError(
                f"TOOLADAPTER_UI_SESSION_KEY_FILE {path}: at least {MIN_KEY_BYTES} bytes needed"
            )
        return cls(key)

    def new(self, token: str, namespaces: tuple[str, ...], seconds: int) -> Session:
        return Session(token, namespaces, time.time() + seconds, secrets.token_hex(16))

    def seal(self, session: Session) -> str:
        nonce = os.urandom(12)
        payload = json.dumps(
            {
                "t": session.token,
                "n": list(session.namespaces),
                "e": session.expires,
                "s": session.sid,
            }
        ).encode()
        return _b64(nonce + self._aead.encrypt(nonce, payload, _AAD))

    def open(self, sealed: str | None, *, now: float | None = None) -> Session | None:
        """The session in a cookie; None when absent, tampered with, or expired."""
        if not sealed or len(sealed) > 4096:
            return None
        try:
            raw = _unb64(sealed)
            payload = json.loads(self._aead.decrypt(raw[:12], raw[12:], _AAD))
            session = Session(
                token=str(payload["t"]),
                namespaces=tuple(str(n) for n in payload["n"]),
                expires=float(payload["e"]),
                sid=str(payload["s"]),
            )
        except (InvalidTag, ValueError, KeyError, TypeError):
            return None
        if session.expires <= (time.time() if now is None else now):
            return None
        return session

    def csrf(self, session: Session) -> str:
        return hmac.new(self._mac, session.sid.encode(), hashlib.sha256).hexdigest()

    def csrf_ok(self, session: Session, token: str | None) -> bool:
        return bool(token) and hmac.compare_digest(self.csrf(session), str(token))


def nonce() -> str:
    """A sign-in form's double-submit value."""
    return secrets.token_urlsafe(24)


def nonces_match(cookie: str | None, form: str | None) -> bool:
    return bool(cookie) and bool(form) and hmac.compare_digest(str(cookie), str(form))
