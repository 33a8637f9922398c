"""The public receipt keys and published chain heads, read from their ConfigMaps
(`kube.receipt_keys`, "namespace/name" as settings name them).

`ReceiptKeys` is what the gateway serves: read with the operator's own client and cached
for `TTL` seconds, so a page full of receipts asks the API server once, not once per
receipt; one read at a time, so a burst of requests at the cache's expiry (`GET
/receipt-keys` needs no token) makes one request to the API server, not one each. The CLI
reads with its user's client, uncached (`read_keys`, `read_chain_heads`)."""

from __future__ import annotations

import asyncio
import time
from typing import Final

from tooladapter.kube.client import Kube, NotFound
from tooladapter.kube.receipt_keys import read_heads, read_public
from tooladapter.receipts.core.chain import Head
from tooladapter.receipts.core.signing import KeySet
from tooladapter.settings import Settings

TTL: Final = 10.0


def _at(config_map: str) -> tuple[str, str]:
    namespace, _, name = config_map.partition("/")
    return namespace, name


async def read_keys(kube: Kube, config_map: str) -> KeySet:
    """The public keys in `config_map` ("namespace/name"), uncached."""
    return await read_public(kube, *_at(config_map))


async def read_chain_heads(kube: Kube, config_map: str) -> dict[tuple[str, str], Head]:
    """The published chain heads in `config_map` ("namespace/name"), uncached."""
    return await read_heads(kube, *_at(config_map))


class ReceiptKeys:
    def __init__(self, kube: Kube, settings: Settings, *, ttl: float = TTL) -> None:
        self.kube = kube
        self.keys_at = settings.receipts.keys_config_map
        self.heads_at = settings.receipts.heads_config_map
        self._ttl = ttl
        self._keys: tuple[float, KeySet] | None = None
        self._heads: tuple[float, dict[tuple[str, str], Head]] | None = None
        self._reading_keys = asyncio.Lock()
        self._reading_heads = asyncio.Lock()

    async def keys(self) -> KeySet:
        """The public keys (empty when none are published yet)."""
        held = self._keys
        if held is not None and time.monotonic() < held[0]:
            return held[1]
        async with self._reading_keys:
            # Whoever waited here found it read by the request before.
            now = time.monotonic()
            if self._keys is None or self._keys[0] <= now:
                try:
                    found = await read_keys(self.kube, self.keys_at)
                except NotFound:
                    found = KeySet()
                self._keys = (now + self._ttl, found)
            return self._keys[1]

    async def head(self, namespace: str, uid: str) -> Head | None:
        """The published head of a namespace incarnation's chain (None: none yet)."""
        held = self._heads
        if held is None or held[0] <= time.monotonic():
            async with self._reading_heads:
                now = time.monotonic()
                if self._heads is None or self._heads[0] <= now:
                    heads = await read_chain_heads(self.kube, self.heads_at)
                    self._heads = (now + self._ttl, heads)
                held = self._heads
        return held[1].get((namespace, uid))


#: One cache per operator client (a gateway has one; `Kube` is not hashable).
_BY_CLIENT: dict[int, ReceiptKeys] = {}


def receipt_keys(kube: Kube, settings: Settings) -> ReceiptKeys:
    held = _BY_CLIENT.get(id(kube))
    if held is None or held.kube is not kube:
        held = _BY_CLIENT[id(kube)] = ReceiptKeys(kube, settings)
    return held
