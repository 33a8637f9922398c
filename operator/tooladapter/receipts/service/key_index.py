"""An idempotency key's first call, read from the receipt index (`artifacts.index`).

Read only when a call won the key's claim (a Lease): a live claim answers by itself, and a
claim is gone only after its call ended and its entry was written, or was released. Two
listings (the key's folder in the namespace's incarnation, and its by-name folder, where a
receipt goes whose end could not read the namespace's uid; usually empty) and one read per
entry, usually one.
"""

from __future__ import annotations

from tooladapter.artifacts import ArtifactStore
from tooladapter.artifacts.index import key_prefix
from tooladapter.receipts.core.index import KeyHolder, key_holder
from tooladapter.receipts.service.storing import read_once


async def first_with_key(
    store: ArtifactStore,
    *,
    namespace: str,
    namespace_uid: str,
    caller: str,
    key: str,
    own_uid: str,
) -> KeyHolder | None:
    """The call that holds `key` of `caller` in this incarnation of `namespace` (None: the
    key is free). Raises whatever the store raises, and ValueError for an entry that does
    not parse: the caller fails closed."""

    def read() -> list[tuple[str, bytes]]:
        found = []
        for prefix in (
            key_prefix(namespace, caller, key, namespace_uid),
            key_prefix(namespace, caller, key, None),
        ):
            for name in store.list(prefix):
                found.append((name, store.get_key(name)))
        return found

    return key_holder(
        await read_once(read), namespace=namespace, caller=caller, key=key, own_uid=own_uid
    )
