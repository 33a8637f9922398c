"""The receipt signing keys as the signing Secret holds them, and their rotation. Pure.

The Secret (`tooladapter-receipt-signing`, key `keyring.json`) holds every key ever made,
private parts included, and which one signs (`active`):

    {"active": "ed25519:<32 hex>",
     "keys": [{"keyid": ..., "privateKey": <base64 raw 32 bytes>,
               "notBefore": <RFC 3339>, "notAfter": <RFC 3339 or null>}, ...]}

Its public half (`public_keys`) is what the ConfigMap `tooladapter-receipt-keys` and the
gateway's `GET /receipt-keys` publish. A rotation adds a key that signs from now on and
ends the previous key's period `overlap` from now (the operators read the Secret again
within that time): receipts the previous key signed stay verifiable, forever.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any, Final

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from tooladapter.receipts.core.signing import (
    KeySet,
    PublicKey,
    Signer,
    key_id,
    load_private,
    private_raw,
)
from tooladapter.timeutil import to_iso

DATA_KEY: Final = "keyring.json"
PUBLIC_DATA_KEY: Final = "keys.json"
#: How long a rotated-out key may still sign: longer than the operators' re-read period.
ROTATION_OVERLAP: Final = timedelta(seconds=60)


def _iso(moment: datetime) -> str:
    return to_iso(moment)


def new_keyring(now: datetime) -> dict[str, Any]:
    """A keyring of one fresh key, signing from `now`."""
    return add_key({"active": None, "keys": []}, now)


def add_key(keyring: Mapping[str, Any], now: datetime) -> dict[str, Any]:
    private = Ed25519PrivateKey.generate()
    keyid = key_id(private.public_key())
    keys = [dict(k) for k in keyring.get("keys") or []]
    return {
        "active": keyid,
        "keys": [
            *keys,
            {
                "keyid": keyid,
                "privateKey": private_raw(private),
                "notBefore": _iso(now),
                "notAfter": None,
            },
        ],
    }


def rotated(
    keyring: Mapping[str, Any], now: datetime, overlap: timedelta = ROTATION_OVERLAP
) -> dict[str, Any]:
    """`keyring` with a new active key; every key still open gets its period's end."""
    ended = {
        **keyring,
        "keys": [
            {**k, "notAfter": k.get("notAfter") or _iso(now + overlap)}
            for k in keyring.get("keys") or []
        ],
    }
    return add_key(ended, now)


def parse_keyring(raw: str | bytes) -> dict[str, Any]:
    """The keyring in the Secret's value; ValueError when it is not one."""
    value = json.loads(raw)
    if not isinstance(value, dict) or not isinstance(value.get("keys"), list):
        raise ValueError("not a receipt keyring")
    signer_of(value)  # the active key must load
    return value


def dump_keyring(keyring: Mapping[str, Any]) -> str:
    return json.dumps(keyring, sort_keys=True, separators=(",", ":"))


def signer_of(keyring: Mapping[str, Any]) -> Signer:
    active = keyring.get("active")
    for item in keyring.get("keys") or []:
        if item.get("keyid") == active:
            signer = Signer.of(load_private(str(item["privateKey"])))
            if signer.keyid != active:
                raise ValueError(f"key {active} is really {signer.keyid}")
            return signer
    raise ValueError(f"the keyring's active key {active!r} is not in it")


def public_keys(keyring: Mapping[str, Any]) -> KeySet:
    keys = []
    for item in keyring.get("keys") or []:
        public = load_private(str(item["privateKey"])).public_key()
        keys.append(
            PublicKey(key_id(public), public, str(item.get("notBefore")), item.get("notAfter"))
        )
    return KeySet.of(keys)


def dump_public(keys: KeySet) -> str:
    return json.dumps(keys.wire(), sort_keys=True, indent=1)


def parse_public(raw: str | bytes) -> KeySet:
    """A key set as published (ConfigMap, `/receipt-keys`, a `--keys` file); ValueError."""
    value = json.loads(raw)
    if not isinstance(value, dict):
        raise ValueError("not a key set")
    return KeySet.parse(value)
