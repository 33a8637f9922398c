"""The receipt signing keys and chain heads as Kubernetes objects, in the operator's
namespace:

- the Secret `tooladapter-receipt-signing` (key `keyring.json`, `pipeline.keyring`): made
  by the first operator to start when absent (a replica losing the create race reads the
  winner's), readable by the operator alone (the chart's Role names it; the egress proxy
  reads Secrets only in the grants' namespace);
- the ConfigMap `tooladapter-receipt-keys` (key `keys.json`): the public keys with their
  validity periods, written from the Secret whenever they differ;
- the ConfigMap `tooladapter-receipt-heads`: one entry per namespace incarnation,
  `<namespace>.<uid>` = `SEQ:sha256:<hex>`, the newest link a writer appended, published
  lazily (`publish_heads`, every few seconds when a head moved, never per call); an entry
  only ever moves forward.
"""

from __future__ import annotations

import asyncio
import base64
import logging
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Final

from tooladapter.artifacts import ArtifactStore
from tooladapter.artifacts.chain import ReceiptChains
from tooladapter.kube.client import Kube
from tooladapter.kube.errors import NotFound, api_errors
from tooladapter.kube.made_once import publish_config_map, read_or_create
from tooladapter.receipts.core.chain import Head
from tooladapter.receipts.core.keyring import (
    DATA_KEY,
    PUBLIC_DATA_KEY,
    dump_keyring,
    dump_public,
    new_keyring,
    parse_keyring,
    parse_public,
    public_keys,
    signer_of,
)
from tooladapter.receipts.core.signing import KeySet, Signer

logger = logging.getLogger("tooladapter.receipts")

LABELS: Final = {
    "app.kubernetes.io/part-of": "tooladapter",
    "app.kubernetes.io/component": "receipts",
}


def _metadata(namespace: str, name: str) -> dict[str, Any]:
    return {"name": name, "namespace": namespace, "labels": dict(LABELS)}


async def read_keyring(kube: Kube, namespace: str, name: str) -> tuple[dict[str, Any], str]:
    """The keyring and the Secret's resourceVersion; `NotFound` when absent."""
    with api_errors():
        secret = await kube.core.read_namespaced_secret(name, namespace)
    raw = (secret.data or {}).get(DATA_KEY)
    if not raw:
        raise ValueError(f"Secret {namespace}/{name} has no key {DATA_KEY!r}")
    return parse_keyring(base64.b64decode(raw)), str(secret.metadata.resource_version)


async def ensure_keyring(kube: Kube, namespace: str, name: str) -> dict[str, Any]:
    """The keyring in Secret namespace/name, made with one fresh key when absent."""

    async def read() -> dict[str, Any]:
        return (await read_keyring(kube, namespace, name))[0]

    async def create() -> dict[str, Any]:
        keyring = new_keyring(datetime.now(UTC))
        body = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": _metadata(namespace, name),
            "type": "Opaque",
            "stringData": {DATA_KEY: dump_keyring(keyring)},
        }
        with api_errors():
            await kube.core.create_namespaced_secret(namespace, body)
        logger.info(
            "receipt signing key %s made in Secret %s/%s", keyring["active"], namespace, name
        )
        return keyring

    return await read_or_create(read, create, where=f"Secret {namespace}/{name}")


async def replace_keyring(
    kube: Kube, namespace: str, name: str, keyring: Mapping[str, Any], resource_version: str
) -> None:
    """Write a changed keyring (a rotation); `Conflict` when the Secret changed meanwhile."""
    body = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {**_metadata(namespace, name), "resourceVersion": resource_version},
        "type": "Opaque",
        "stringData": {DATA_KEY: dump_keyring(keyring)},
    }
    with api_errors():
        await kube.core.replace_namespaced_secret(name, namespace, body)


async def _read_config_map(kube: Kube, namespace: str, name: str) -> Any:
    with api_errors():
        return await kube.core.read_namespaced_config_map(name, namespace)


async def read_public(kube: Kube, namespace: str, name: str) -> KeySet:
    """The published public keys; `NotFound` when the ConfigMap is absent."""
    found = await _read_config_map(kube, namespace, name)
    return parse_public((found.data or {}).get(PUBLIC_DATA_KEY) or '{"keys": []}')


async def publish_public(kube: Kube, namespace: str, name: str, keys: KeySet) -> bool:
    """The ConfigMap namespace/name holding `keys` (written only when it differs)."""
    text = dump_public(keys)

    def changed(data: dict[str, str]) -> dict[str, str] | None:
        return None if data.get(PUBLIC_DATA_KEY) == text else {PUBLIC_DATA_KEY: text}

    return await publish_config_map(
        kube, namespace, name, _metadata(namespace, name), changed, tries=3
    )


def head_key(namespace: str, uid: str) -> str:
    return f"{namespace}.{uid}"


def parse_heads(data: Mapping[str, str] | None) -> dict[tuple[str, str], Head]:
    heads: dict[tuple[str, str], Head] = {}
    for key, value in (data or {}).items():
        namespace, _, uid = key.partition(".")
        try:
            heads[(namespace, uid)] = Head.parse(value)
        except ValueError:
            continue
    return heads


async def read_heads(kube: Kube, namespace: str, name: str) -> dict[tuple[str, str], Head]:
    """The published heads (empty when the ConfigMap is absent)."""
    try:
        found = await _read_config_map(kube, namespace, name)
    except NotFound:
        return {}
    return parse_heads(found.data)


def merged(
    data: Mapping[str, str] | None, heads: Mapping[tuple[str, str], Head]
) -> dict[str, str] | None:
    """The ConfigMap's data with `heads`, each entry only moved forward; None: unchanged."""
    held = parse_heads(data)
    out = dict(data or {})
    changed = False
    for (namespace, uid), head in heads.items():
        before = held.get((namespace, uid))
        if before is None or head.sequence > before.sequence:
            out[head_key(namespace, uid)] = head.wire()
            changed = True
    return out if changed else None


async def publish_heads(
    kube: Kube, namespace: str, name: str, heads: Mapping[tuple[str, str], Head]
) -> None:
    """Move the published heads forward to `heads` (a read and at most one write)."""
    await publish_config_map(
        kube,
        namespace,
        name,
        _metadata(namespace, name),
        lambda data: merged(data, heads),
        tries=5,
    )


def _split(namespaced: str) -> tuple[str, str]:
    namespace, _, name = namespaced.partition("/")
    return namespace, name


#: How often an operator reads the signing Secret again (a rotation takes effect within
#: this; `keyring.ROTATION_OVERLAP` is longer).
KEYRING_REFRESH_SECONDS: Final = 15.0


class ReceiptKeeper:
    """An operator's signing key and receipt chains: made at start (`open`), the key read
    again every `KEYRING_REFRESH_SECONDS`, moved heads published every
    `heads_publish_seconds` (`run`)."""

    def __init__(
        self,
        kube: Kube,
        store: ArtifactStore,
        *,
        signing_secret: str,
        keys_config_map: str,
        heads_config_map: str,
        heads_publish_seconds: float,
    ) -> None:
        self.kube = kube
        self.secret = _split(signing_secret)
        self.keys_map = _split(keys_config_map)
        self.heads_map = _split(heads_config_map)
        self.publish_seconds = heads_publish_seconds
        self._signer: Signer | None = None
        self.chains = ReceiptChains(store, self.signer)

    def signer(self) -> Signer:
        if self._signer is None:
            raise RuntimeError("no receipt signing key yet")
        return self._signer

    async def open(self) -> None:
        """Fail closed: no start without a signing key. Then the public keys published
        and the chains' published heads read (where each chain's end is looked for)."""
        keyring = await ensure_keyring(self.kube, *self.secret)
        self._signer = signer_of(keyring)
        await publish_public(self.kube, *self.keys_map, public_keys(keyring))
        for key, head in (await read_heads(self.kube, *self.heads_map)).items():
            self.chains.hint(key, head)
        logger.info("receipts signed with key %s", self._signer.keyid)

    async def repair(self) -> None:
        """Every chain with a published head read to its end (`ReceiptChains.discover`), so
        the first receipt after a start waits for no store reads. Store I/O on a thread."""
        for namespace, uid in list(self.chains.hinted()):
            try:
                await asyncio.to_thread(self.chains.ensure_head, namespace, uid)
            except Exception:
                logger.warning("receipt chain %s/%s: repair failed", namespace, uid, exc_info=True)

    async def refresh(self) -> None:
        keyring, _ = await read_keyring(self.kube, *self.secret)
        signer = signer_of(keyring)
        if self._signer is None or signer.keyid != self._signer.keyid:
            logger.info("receipts signed with key %s from now on (rotated)", signer.keyid)
        self._signer = signer
        await publish_public(self.kube, *self.keys_map, public_keys(keyring))

    async def publish(self) -> None:
        moved = self.chains.take_changed()
        if not moved:
            return
        try:
            await publish_heads(self.kube, *self.heads_map, moved)
        except BaseException:
            self.chains.mark_changed(moved)  # next time
            raise

    async def run(self) -> None:
        """Forever: the key re-read and the heads published, each failure logged."""
        last_refresh = asyncio.get_running_loop().time()
        while True:
            await asyncio.sleep(min(self.publish_seconds, KEYRING_REFRESH_SECONDS))
            now = asyncio.get_running_loop().time()
            try:
                await self.publish()
            except Exception as exc:
                logger.warning("publishing receipt chain heads failed: %s", type(exc).__name__)
            if now - last_refresh >= KEYRING_REFRESH_SECONDS:
                last_refresh = now
                try:
                    await self.refresh()
                except Exception as exc:
                    # The key in hand keeps signing; a retired one only until its period ends.
                    logger.warning("reading the receipt signing key failed: %s", type(exc).__name__)
