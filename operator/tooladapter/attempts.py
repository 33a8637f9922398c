"""The queue of each attempt's workspace: its calls run one at a time, in arrival order.

A call joins when it is ready to execute (Brokered, after its capacity wait: a call waiting
for an approval holds no place) and leaves when its flow ends, whatever the end. The key
is the workspace's (`pipeline.warm.workspace_key`: namespace, caller and attemptId), so
queues of different callers or tenants never meet: a call that hangs holds only its own
attempt, for at most its own timeout.

asyncio.Lock wakes its waiters first come, first served, and a newcomer never takes the
lock while others wait: arrival order. One operator leads a namespace at a time
(`kube.leases`), so an in-process queue is the whole queue; after a restart, a call that
was Executing is only followed (never run again), and the rest join anew.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field


@dataclass
class _Queue:
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    #: Calls holding or waiting for the lock.
    members: set[str] = field(default_factory=set)


class AttemptQueues:
    def __init__(self) -> None:
        self._queues: dict[str, _Queue] = {}
        #: uid -> key of the queue the call holds.
        self._holding: dict[str, str] = {}

    def busy(self, key: str) -> bool:
        """A call of the attempt runs or waits (its workspace must stay)."""
        queue = self._queues.get(key)
        return queue is not None and bool(queue.members)

    def holds(self, uid: str) -> bool:
        return uid in self._holding

    async def join(self, key: str, uid: str) -> bool:
        """Wait for the attempt's turn; True when the call had to wait. Re-joining a queue
        the call already holds returns at once."""
        if self._holding.get(uid) == key:
            return False
        queue = self._queues.setdefault(key, _Queue())
        queue.members.add(uid)
        waited = queue.lock.locked()
        try:
            await queue.lock.acquire()
        except BaseException:
            self._forget(key, uid)
            raise
        self._holding[uid] = key
        return waited

    def leave(self, uid: str) -> None:
        """The call's flow ended (or it left before acting): the next call's turn."""
        key = self._holding.pop(uid, None)
        if key is None:
            return
        queue = self._queues.get(key)
        if queue is not None and queue.lock.locked():
            queue.lock.release()
        self._forget(key, uid)

    def _forget(self, key: str, uid: str) -> None:
        queue = self._queues.get(key)
        if queue is None:
            return
        queue.members.discard(uid)
        if not queue.members and not queue.lock.locked():
            del self._queues[key]


__all__ = ["AttemptQueues"]
