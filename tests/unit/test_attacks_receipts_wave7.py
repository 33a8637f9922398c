"""Attack pass 7 on signed, chained receipts (issue 30): what an agent (a requester in its
own namespace) can do to the receipt chain writer and the event outbox."""

from __future__ import annotations

import asyncio
import threading

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from tooladapter.artifacts.chain import ReceiptChains, chain_prefix
from tooladapter.flow.ending import write_receipt
from tooladapter.model import ToolInvocationSpec, ToolInvocationStatus
from tooladapter.pipeline.signing import Signer

from .fake_cluster import MemoryStore

FLOOD, QUIET = "team-flood", "team-quiet"
UIDS = {
    FLOOD: "00000000-0000-4000-8000-00000000f100",
    QUIET: "00000000-0000-4000-8000-00000000a000",
}


class GatedStore(MemoryStore):
    """A store whose chain links of one namespace wait for a gate (a slow bucket)."""

    def __init__(self, gated: str) -> None:
        super().__init__()
        self.gated = chain_prefix(gated, UIDS[gated])
        self.gate = threading.Event()
        self.waiting = threading.Event()

    def put_key(self, key: str, data: bytes) -> None:
        if key.startswith(self.gated):
            self.waiting.set()
            self.gate.wait(30)
        super().put_key(key, data)


def _spec(namespace: str) -> ToolInvocationSpec:
    return ToolInvocationSpec.model_validate(
        {
            "tool": {"id": "echo", "version": "1.0.0"},
            "arguments": {"n": 1},
            "caller": {"kind": "agent", "name": f"system:serviceaccount:{namespace}:agent"},
        }
    )


async def _write(store: MemoryStore, chains: ReceiptChains, namespace: str, n: int) -> None:
    await write_receipt(
        store,
        of=f"{namespace}/call-{n}",
        namespace=namespace,
        name=f"call-{n}",
        uid=f"uid-{namespace}-{n}",
        spec=_spec(namespace),
        status=ToolInvocationStatus(),
        tool_kind="native",
        sandbox_kind=None,
        sandbox_pool=None,
        command_line=[],
        written_at="2026-12-03T20:00:00Z",
        audit=None,
        namespace_uid=UIDS[namespace],
        chains=chains,
    )


async def test_one_namespaces_flood_of_receipts_never_holds_another_namespaces() -> None:
    """Hit: the chain lock was taken on the store's shared threads (4), so a namespace
    with many calls ending while its store writes were slow held every thread (one writing,
    the others waiting for its chain's lock) and another namespace's receipt, hence its
    calls' ends, waited behind the whole flood: what known-limits says does not happen."""
    store = GatedStore(FLOOD)
    signer = Signer.of(Ed25519PrivateKey.generate())
    chains = ReceiptChains(store, lambda: signer)
    flood = [asyncio.create_task(_write(store, chains, FLOOD, n)) for n in range(8)]
    try:
        await asyncio.to_thread(store.waiting.wait, 10)
        assert store.waiting.is_set()
        # The flood's first link is held by its slow store; the quiet namespace's receipt
        # is written meanwhile (the bound only fails the test, it never paces it).
        await asyncio.wait_for(_write(store, chains, QUIET, 0), 10)
        assert any(k.startswith(chain_prefix(QUIET, UIDS[QUIET])) for k in store.keys)
    finally:
        store.gate.set()
        await asyncio.gather(*flood)
    links = [k for k in store.keys if k.startswith(chain_prefix(FLOOD, UIDS[FLOOD]))]
    assert len(links) == 8
