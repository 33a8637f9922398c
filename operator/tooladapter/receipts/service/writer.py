"""Storing a call's receipt: signed, linked into its chain, indexed, in one trip.

One input, `ReceiptInput`: what the receipt says of the call. `ReceiptWriter.write` stores
it and its index entries (`artifacts.index`) and sets `auditRef`, `receiptRef` and the
summary on the call's status. The chain link it writes is also the integration events'
outbox (`outbox`): an event is derived from the link, so storing the receipt is sending it.
Used by the flow (every call's end) and by an operator's confirmation of an Uncertain effect.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from tooladapter import offload
from tooladapter.artifacts import ArtifactStore, Space, content_ref
from tooladapter.artifacts.chain import Appended, AppendQueue, ReceiptChains
from tooladapter.artifacts.index import (
    approved_call_key,
    arguments_document,
    call_entry,
    entries_of,
    entry_bytes,
    key_entry,
)
from tooladapter.enums import ArtifactKind
from tooladapter.kube.cluster import Cluster
from tooladapter.model import (
    AuditRequirements,
    HttpSpec,
    ReceiptSummary,
    ToolInvocationSpec,
    ToolInvocationStatus,
)
from tooladapter.receipts.core.record import build_receipt
from tooladapter.receipts.core.signing import seal
from tooladapter.receipts.service.storing import OnFailure, as_kind, store_all, until_stored
from tooladapter.timeutil import parse_time

logger = logging.getLogger("tooladapter.invocations")


@dataclass(frozen=True)
class ReceiptInput:
    """What a receipt records of one call. `status` is the call's own: the writer sets its
    `auditRef`, `receiptRef` and `receipt` summary once the receipt is stored."""

    namespace: str
    name: str
    uid: str
    spec: ToolInvocationSpec
    status: ToolInvocationStatus
    tool_kind: str | None
    sandbox_kind: str | None
    sandbox_pool: str | None
    command_line: Sequence[str]
    written_at: str
    audit: AuditRequirements | None
    #: The namespace incarnation whose chain the receipt joins (None: signed, unchained).
    namespace_uid: str | None = None
    #: An http tool's http block, of the descriptor the call was validated against: the
    #: receipt's `target` (None for the other kinds, or when that descriptor is unknown).
    http: HttpSpec | None = None

    @property
    def of(self) -> str:
        """The call, as the store's warnings name it."""
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class ReceiptWriter:
    """The artifact store, the chains (every receipt is signed: there is no unsigned
    receipt) and the cluster (to read a namespace's incarnation the watch has not delivered
    yet; None: only what the watch knows)."""

    store: ArtifactStore
    chains: ReceiptChains
    cluster: Cluster | None = None

    async def incarnation(
        self, namespace: str, call: Mapping[str, Any], *, known: str | None
    ) -> str | None:
        """The uid of `call`'s namespace incarnation, which names its receipt chain: the
        namespaces' watch's (`known`), else the API server's (a call in a namespace created
        a moment ago can end before the watch delivers it; without the uid its receipt
        would be outside any chain, and no event would be sent for it). A namespace created
        after the call, or one that cannot be read now, gives None: the receipt is signed,
        outside the chains."""
        if known or self.cluster is None:
            return known
        try:
            uid, created, _ = await self.cluster.namespace_incarnation(namespace)
        except Exception:
            logger.warning("namespace %s: its uid could not be read", namespace, exc_info=True)
            return None
        called = (call.get("metadata") or {}).get("creationTimestamp")
        try:
            later = bool(created and called) and parse_time(created) > parse_time(str(called))
        except ValueError:
            later = True
        return None if not uid or later else uid

    async def write(
        self,
        entry: ReceiptInput,
        *,
        results: Sequence[bytes] = (),
        on_failure: OnFailure | None = None,
    ) -> None:
        """Store the receipt and its index entries, and set `auditRef`, `receiptRef` and
        the summary on `entry.status`.

        A duplicate keeps its winner's receipt as `receiptRef`; its own is its `auditRef`.
        The entries are written before status names the receipt, so a persisted end is
        always indexed, and retention never deletes a call (nor its idempotency claim) that
        the index cannot find again.

        `results` (artifacts status names already) are stored first, in the results' key
        space (`Space.RESULTS`): never read, served or verified as a receipt. Everything goes in one
        trip to the store's threads (it was up to five), shared with the other receipts of the
        chain that wait meanwhile (`AppendQueue`): a trip may wait for the GIL behind a busy
        event loop, up to `sys.getswitchinterval()` each way, and each costs a round of fsyncs.
        Every write is idempotent (by content hash, or write-once with the same bytes), so a
        refused trip is made again.

        The stored receipt is signed, as the next link of its namespace incarnation's chain
        (`artifacts.chain`, which stores it once); `status.receipt.sequence` names its link."""
        store, chains, status = self.store, self.chains, entry.status
        namespace, namespace_uid = entry.namespace, entry.namespace_uid

        def canonical_receipt() -> dict[str, Any]:
            receipt = build_receipt(
                namespace=namespace,
                name=entry.name,
                uid=entry.uid,
                spec=entry.spec,
                status=status,
                tool_kind=entry.tool_kind or "unknown",
                sandbox_kind=entry.sandbox_kind,
                sandbox_pool=entry.sandbox_pool,
                command_line=list(entry.command_line) or None,
                written_at=entry.written_at,
                audit=entry.audit,
                namespace_uid=namespace_uid,
                http=entry.http,
            )
            return receipt

        # Hashing the arguments (pure Python, up to the argument bound): off the event loop,
        # where every other call would wait, unless they are small.
        arguments = getattr(entry.spec, "arguments", None) or {}
        receipt = await offload.run(namespace, offload.rough_size(arguments), canonical_receipt)

        def index_writes(own_ref: str) -> None:
            approved = approved_call_key(receipt, own_ref)
            for key in entries_of(receipt, own_ref):
                value = entry_bytes(own_ref)
                if key == approved:
                    # The arguments a later reviewer compares with: an artifact of their own.
                    document = arguments_document(receipt, arguments)
                    store.put(document, Space.RESULTS)
                    bound_at = status.approval.bound_at if status.approval else None
                    value = call_entry(
                        receipt, own_ref, approved_at=bound_at, arguments_ref=content_ref(document)
                    )
                store.put_key(key, value)
            # The key's entry: after the claim expired and retention deleted the call, a
            # later call with the key still ends as this one (`flow.admission`).
            keyed = key_entry(receipt, own_ref)
            if keyed is not None:
                store.put_key(*keyed)

        store_results = [partial(store.put, result, Space.RESULTS) for result in results]
        if namespace_uid:
            # Signed, stored once by its hash and linked (`artifacts.chain`) in a trip that
            # carries every receipt of the chain waiting meanwhile (`AppendQueue`).
            own_ref, sequence = await self._chained(
                _Chained(
                    receipt=receipt,
                    before=store_results,
                    after=index_writes,
                    of=entry.of,
                    on_failure=on_failure,
                    namespace=namespace,
                    uid=namespace_uid,
                )
            )
        else:
            # No incarnation known: signed, but outside any chain (`chain: null`).
            receipt["chain"] = None
            signed = seal(receipt, chains.signer())
            own_ref, sequence = content_ref(signed), 0
            writes: list[tuple[ArtifactKind, Callable[[], object]]] = [
                *((ArtifactKind.RESULT, put) for put in store_results),
                (ArtifactKind.RECEIPT, partial(store.put, signed)),
                (ArtifactKind.INDEX, partial(index_writes, own_ref)),
            ]
            await store_all(writes, of=entry.of, on_failure=on_failure)
        status.audit_ref = own_ref
        if not (status.duplicate_of and status.receipt_ref):
            status.receipt_ref = own_ref
        confirmation = status.effect_confirmation
        status.receipt = ReceiptSummary(
            state=status.state,
            effect_confirmed=confirmation.effect_happened if confirmation else None,
            written_at=entry.written_at,
            sequence=sequence or None,
        )

    async def _chained(self, job: _Chained) -> tuple[str, int]:
        """`job`'s receipt appended to its chain, with its results before and its index
        entries after, in the next trip of that chain: its reference and sequence number."""
        queue = self.chains.queue(job.namespace, job.uid)
        queue.waiting.append(job)
        if queue.drain is None:
            queue.drain = asyncio.create_task(self._drain(queue, job.namespace, job.uid))
        return await job.done

    async def _drain(self, queue: AppendQueue, namespace: str, uid: str) -> None:
        """Trips of one chain, one at a time, each taking every receipt waiting then; a
        trip the store refuses is made again (`until_stored`), going on from the links it
        made. A call whose end was cancelled while it waited is left out (its end, resumed,
        writes its receipt then: never two links for one call)."""
        try:
            while queue.waiting:
                taken = queue.waiting[:MAX_BATCH]
                del queue.waiting[: len(taken)]
                batch: list[_Chained] = [job for job in taken if not job.done.done()]
                if not batch:
                    continue
                made: list[Appended] = []
                # Signed but not yet known to be linked: a trip made again stores these same
                # bytes, never signs them anew (`ReceiptChains.append_all`).
                signed: list[Appended] = []
                # Whose own write (results, index entries) the store refused, if one's: only
                # that call hears of it, never its error under another call's name.
                culprit: list[_Chained | None] = [None]

                def trip(
                    batch: list[_Chained] = batch,
                    made: list[Appended] = made,
                    signed: list[Appended] = signed,
                    culprit: list[_Chained | None] = culprit,
                ) -> None:
                    # A call whose end was cancelled while its trip was refused is left out
                    # (its resumed end links its only receipt), unless its link was made:
                    # what was signed is first checked against the store (`confirm_signed`).
                    rest = batch[len(made) :]
                    if signed and any(job.done.cancelled() for job in rest):
                        self.chains.confirm_signed(namespace, uid, into=made, signed=signed)
                    if not signed:
                        batch[len(made) :] = [
                            j for j in batch[len(made) :] if not j.done.cancelled()
                        ]
                    for job in batch:
                        culprit[0] = job
                        for put in job.before:
                            as_kind(ArtifactKind.RESULT, put)
                    culprit[0] = None
                    as_kind(
                        ArtifactKind.RECEIPT,
                        partial(
                            self.chains.append_all,
                            [job.receipt for job in batch],
                            namespace=namespace,
                            uid=uid,
                            into=made,
                            signed=signed,
                        ),
                    )
                    for job, (_, ref, _) in zip(batch, made, strict=True):
                        culprit[0] = job
                        as_kind(ArtifactKind.INDEX, partial(job.after, ref))
                    culprit[0] = None

                def tell(
                    kind: ArtifactKind,
                    exc: Exception,
                    batch: list[_Chained] = batch,
                    culprit: list[_Chained | None] = culprit,
                ) -> None:
                    for job in [culprit[0]] if culprit[0] is not None else batch:
                        if job.on_failure is None:
                            continue
                        try:
                            job.on_failure(kind, exc)
                        except Exception:
                            # Telling is best effort: it never stops the receipts' trip.
                            logger.warning("%s: telling of a store refusal failed", job.of)

                try:
                    await until_stored(
                        trip,
                        ArtifactKind.RECEIPT,
                        of=batch[0].of if len(batch) == 1 else f"{len(batch)} calls of {namespace}",
                        on_failure=tell,
                    )
                except asyncio.CancelledError:
                    for job in batch:
                        job.done.cancel()
                    raise
                except Exception as exc:  # until_stored retries every Exception: a bug
                    for job in batch:
                        if not job.done.done():
                            job.done.set_exception(exc)
                    continue
                for job, (_, ref, sequence) in zip(batch, made, strict=True):
                    if not job.done.done():
                        job.done.set_result((ref, sequence))
        finally:
            queue.drain = None
            for job in queue.waiting:
                # Left by a drain that ended early (cancelled: the operator stops).
                if not job.done.done():
                    job.done.cancel()
            queue.waiting.clear()


#: Receipts one trip of a chain carries at most (its fsync round and its signing time).
MAX_BATCH = 64


@dataclass
class _Chained:
    """One call's receipt waiting for its chain's trip: the results stored before it, the
    index entries after (given its reference), and who hears of the store's refusal."""

    receipt: dict[str, Any]
    before: Sequence[Callable[[], object]]
    after: Callable[[str], None]
    of: str
    on_failure: OnFailure | None
    namespace: str
    uid: str
    done: asyncio.Future[tuple[str, int]] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )
