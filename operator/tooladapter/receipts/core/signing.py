"""Signed receipts: a DSSE envelope of an in-toto Statement v1, signed with Ed25519.

A receipt (`receipt.build_receipt`) is the Statement's predicate; its subject is the
invocation (name, uid, request hash). The stored bytes are the RFC 8785 canonical JSON of
the envelope, so `receiptRef` stays the sha256 of what is stored, and a reader holding the
public keys can check who wrote it. Pure functions over bytes and key objects: no store,
no cluster.

- DSSE (github.com/secure-systems-lab/dsse, protocol.md): the signature is over
  `PAE(payloadType, payload)` = `"DSSEv1" SP LEN(type) SP type SP LEN(body) SP body`,
  LEN in ASCII decimal, never over the JSON of the envelope.
- in-toto Statement v1 (github.com/in-toto/attestation, spec/v1/statement.md): `_type`,
  `subject` (ResourceDescriptors, each with a `digest`), `predicateType`, `predicate`.

A key set (`KeySet`) holds public keys with their validity periods: a key verifies only
receipts it signed while valid (`signedAt` of the receipt's chain link, within the
period, `SKEW` either side). A retired key keeps verifying what it signed before.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from enum import StrEnum
from typing import Any, Final

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)

from tooladapter.pipeline.hashing import canonical_json
from tooladapter.timeutil import parse_time

PAYLOAD_TYPE: Final = "application/vnd.in-toto+json"
STATEMENT_TYPE: Final = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE: Final = "https://tooladapter.dev/receipts/tool-invocation-v1"
ALGORITHM: Final = "ed25519"
#: Clock difference tolerated between the signer and the key set's validity periods.
SKEW: Final = timedelta(seconds=60)
#: Envelopes bigger than this are not parsed (a receipt is a few KiB).
MAX_ENVELOPE_BYTES: Final = 4 * 1024 * 1024


class SignatureStatus(StrEnum):
    """What a reader can say of a stored receipt's signature."""

    VALID = "valid"
    """Signed by a known key, within its validity period."""
    INVALID = "invalid"
    """Signed, but the signature does not verify (rewritten), or the envelope is malformed."""
    UNKNOWN_KEY = "unknown-key"
    """Signed by a key the key set does not hold."""
    OUTSIDE_VALIDITY = "outside-validity"
    """Signed by a known key outside its validity period (after it was retired)."""
    UNSIGNED = "unsigned"
    """A plain receipt, without an envelope: the operator signs every receipt, so whoever
    wrote it had no key (a rewrite, or a forgery)."""


class DuplicateKey(ValueError):
    """A JSON object naming one key twice."""


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise DuplicateKey(f"key {key!r} appears twice")
        seen[key] = value
    return seen


def loads_unique(data: bytes | str) -> Any:
    """`json.loads` refusing an object that names a key twice (`DuplicateKey`): Python keeps
    the last, other readers the first, so such bytes could say one thing to the verifier
    and another to whoever reads them next."""
    return json.loads(data, object_pairs_hook=_unique)


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE's pre-authentication encoding of (type, body)."""
    kind = payload_type.encode()
    return b"DSSEv1 %d %s %d %s" % (len(kind), kind, len(payload), payload)


def key_id(public: Ed25519PublicKey) -> str:
    """`ed25519:` + the first 32 hex digits of the sha256 of the raw public key."""
    raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return f"{ALGORITHM}:{hashlib.sha256(raw).hexdigest()[:32]}"


def public_raw(public: Ed25519PublicKey) -> str:
    raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return base64.b64encode(raw).decode()


def private_raw(private: Ed25519PrivateKey) -> str:
    raw = private.private_bytes(
        serialization.Encoding.Raw,
        serialization.PrivateFormat.Raw,
        serialization.NoEncryption(),
    )
    return base64.b64encode(raw).decode()


def load_private(raw_b64: str) -> Ed25519PrivateKey:
    return Ed25519PrivateKey.from_private_bytes(base64.b64decode(raw_b64, validate=True))


def load_public(raw_b64: str) -> Ed25519PublicKey:
    return Ed25519PublicKey.from_public_bytes(base64.b64decode(raw_b64, validate=True))


@dataclass(frozen=True)
class Signer:
    """The active signing key (never logged: `repr` names only its id)."""

    keyid: str
    private: Ed25519PrivateKey

    def __repr__(self) -> str:
        return f"Signer({self.keyid})"

    @classmethod
    def of(cls, private: Ed25519PrivateKey) -> Signer:
        return cls(key_id(private.public_key()), private)


def subject_of(receipt: Mapping[str, Any]) -> dict[str, Any]:
    """The invocation as an in-toto ResourceDescriptor: its name, its uid and its request
    hash (the digest; a call refused before its request was hashed has the sha256 of its
    uid instead, which `annotations.requestHash: null` says)."""
    request = receipt.get("requestHash")
    uid = str(receipt.get("invocationId") or "")
    if isinstance(request, str) and request.startswith("sha256:"):
        digest = request.removeprefix("sha256:")
    else:
        digest = hashlib.sha256(uid.encode()).hexdigest()
    return {
        "name": f"toolinvocations/{receipt.get('tenantId')}/{receipt.get('invocationName')}",
        "digest": {"sha256": digest},
        "annotations": {"invocationId": uid, "requestHash": request},
    }


def statement(receipt: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "_type": STATEMENT_TYPE,
        "subject": [subject_of(receipt)],
        "predicateType": PREDICATE_TYPE,
        "predicate": dict(receipt),
    }


def seal(receipt: Mapping[str, Any], signer: Signer) -> bytes:
    """The stored bytes of `receipt`: the canonical JSON of its signed envelope."""
    payload = canonical_json(statement(receipt))
    signature = signer.private.sign(pae(PAYLOAD_TYPE, payload))
    return canonical_json(
        {
            "payloadType": PAYLOAD_TYPE,
            "payload": base64.b64encode(payload).decode(),
            "signatures": [{"keyid": signer.keyid, "sig": base64.b64encode(signature).decode()}],
        }
    )


class MalformedEnvelope(ValueError):
    """Bytes that claim to be an envelope but are not a well-formed one."""


@dataclass(frozen=True)
class Opened:
    """An envelope's parts, not yet verified."""

    payload: bytes
    statement: dict[str, Any]
    signatures: tuple[tuple[str, bytes], ...]

    @property
    def receipt(self) -> dict[str, Any]:
        predicate = self.statement.get("predicate")
        return predicate if isinstance(predicate, dict) else {}


def is_envelope(value: Any) -> bool:
    return isinstance(value, dict) and "payloadType" in value and "payload" in value


def open_envelope(value: Mapping[str, Any]) -> Opened:
    """The parts of a parsed envelope; `MalformedEnvelope` when they are not well-formed."""
    if value.get("payloadType") != PAYLOAD_TYPE:
        raise MalformedEnvelope(f"payloadType is {value.get('payloadType')!r}")
    try:
        payload = base64.b64decode(str(value.get("payload")), validate=True)
        parsed = loads_unique(payload)
        signatures = tuple(
            (str(item["keyid"]), base64.b64decode(str(item["sig"]), validate=True))
            for item in value.get("signatures") or []
        )
    except (binascii.Error, ValueError, KeyError, TypeError, RecursionError) as exc:
        raise MalformedEnvelope(f"{type(exc).__name__}: {exc}") from None
    if not isinstance(parsed, dict) or parsed.get("_type") != STATEMENT_TYPE:
        raise MalformedEnvelope("the payload is not an in-toto Statement v1")
    if parsed.get("predicateType") != PREDICATE_TYPE:
        raise MalformedEnvelope(f"predicateType is {parsed.get('predicateType')!r}")
    if not signatures:
        raise MalformedEnvelope("no signature")
    return Opened(payload, parsed, signatures)


def parse_stored(data: bytes) -> tuple[dict[str, Any], Opened | None] | None:
    """The receipt in stored bytes and, when signed, its opened envelope; None for bytes
    that are neither (not JSON, or a malformed envelope)."""
    if len(data) > MAX_ENVELOPE_BYTES:
        return None
    try:
        value = loads_unique(data)
    except (ValueError, UnicodeDecodeError, RecursionError):
        # Nested thousands deep by whoever can write the store: not a receipt, not a crash.
        return None
    if not isinstance(value, dict):
        return None
    if not is_envelope(value):
        return value, None
    try:
        opened = open_envelope(value)
    except MalformedEnvelope:
        return None
    return opened.receipt, opened


def receipt_of(data: bytes) -> dict[str, Any] | None:
    """The receipt in stored bytes, signed or not (None when there is none)."""
    parsed = parse_stored(data)
    return parsed[0] if parsed is not None else None


@dataclass(frozen=True)
class PublicKey:
    keyid: str
    key: Ed25519PublicKey
    not_before: str
    #: None while the key signs; set when a rotation retired it.
    not_after: str | None = None

    def wire(self) -> dict[str, Any]:
        return {
            "keyid": self.keyid,
            "algorithm": ALGORITHM,
            "publicKey": public_raw(self.key),
            "notBefore": self.not_before,
            "notAfter": self.not_after,
        }

    def valid_at(self, moment: str | None) -> bool:
        if not moment:
            return False
        try:
            at = parse_time(moment)
            if at < parse_time(self.not_before) - SKEW:
                return False
            return self.not_after is None or at <= parse_time(self.not_after) + SKEW
        except ValueError:
            return False


@dataclass(frozen=True)
class KeySet:
    keys: tuple[PublicKey, ...] = ()

    def find(self, keyid: str) -> PublicKey | None:
        return next((k for k in self.keys if k.keyid == keyid), None)

    def wire(self) -> dict[str, Any]:
        return {"keys": [k.wire() for k in self.keys]}

    @classmethod
    def parse(cls, value: Mapping[str, Any]) -> KeySet:
        """A key set from its JSON form (`wire`); ValueError when malformed."""
        keys = []
        for item in value.get("keys") or []:
            if item.get("algorithm", ALGORITHM) != ALGORITHM:
                continue
            try:
                public = load_public(str(item["publicKey"]))
            except (KeyError, ValueError, binascii.Error) as exc:
                raise ValueError(f"key {item.get('keyid')!r}: {exc}") from None
            keyid = key_id(public)
            if item.get("keyid") not in (None, keyid):
                raise ValueError(f"key {item.get('keyid')!r} is really {keyid}")
            keys.append(
                PublicKey(keyid, public, str(item.get("notBefore") or ""), item.get("notAfter"))
            )
        return cls(tuple(keys))

    @classmethod
    def of(cls, keys: Iterable[PublicKey]) -> KeySet:
        return cls(tuple(keys))


def signature_status(opened: Opened | None, keys: KeySet) -> tuple[SignatureStatus, str | None]:
    """Whether a receipt's envelope carries a valid signature of `keys`, and whose."""
    if opened is None:
        return SignatureStatus.UNSIGNED, None
    signed = pae(PAYLOAD_TYPE, opened.payload)
    moment = (opened.receipt.get("chain") or {}).get("signedAt") or opened.receipt.get("writtenAt")
    outcome, who = SignatureStatus.UNKNOWN_KEY, None
    for keyid, sig in opened.signatures:
        known = keys.find(keyid)
        if known is None:
            continue
        try:
            known.key.verify(sig, signed)
        except InvalidSignature:
            outcome, who = SignatureStatus.INVALID, keyid
            continue
        if known.valid_at(str(moment) if moment else None):
            return SignatureStatus.VALID, keyid
        outcome, who = SignatureStatus.OUTSIDE_VALIDITY, keyid
    return outcome, who


def stored_signature(
    receipt: Mapping[str, Any], opened: Opened | None, keys: KeySet
) -> tuple[SignatureStatus, str | None]:
    """The signature verdict of one stored receipt (`parse_stored`'s pair): a signed one's
    check against `keys`; an unsigned one is `UNSIGNED` (never valid)."""
    return signature_status(opened, keys)


def signature_of_stored(
    parsed: tuple[dict[str, Any], Opened | None] | None, keys: KeySet
) -> tuple[SignatureStatus, str | None]:
    """The signature verdict of stored bytes as `parse_stored` read them: bytes that are
    neither a receipt nor a well-formed envelope (None: malformed, unsigned envelope,
    duplicate keys, trailing bytes, oversized) are `INVALID`."""
    if parsed is None:
        return SignatureStatus.INVALID, None
    return stored_signature(parsed[0], parsed[1], keys)
