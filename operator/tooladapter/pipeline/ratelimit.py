"""Rate limits as the reference declares them: `perMinute` and `concurrency` per tool and
tenant (and per caller where a ToolPolicy says so), counted when a call starts executing.

The book is plain data: starts by key within the last minute and the calls running now.
The flow consults it right before `Executing` (check and count in one step, with no await
between, so two calls cannot both take the last slot), and the watch feeds it every
invocation it sees, so an operator that takes over a scope rebuilds it from the listing
without an API write per call.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta

#: What one limit counts: (namespace, tool id, caller or "" for the whole tenant).
Key = tuple[str, str, str]

WINDOW = timedelta(minutes=1)


@dataclass(frozen=True)
class Verdict:
    allowed: bool
    reason: str = ""
    retry_after_seconds: int = 0


@dataclass
class Usage:
    #: uid -> when it started executing.
    starts: dict[str, datetime] = field(default_factory=dict)
    #: uids executing now.
    running: set[str] = field(default_factory=set)

    def prune(self, now: datetime) -> None:
        for uid, started in list(self.starts.items()):
            if now - started >= WINDOW and uid not in self.running:
                del self.starts[uid]


@dataclass
class RateBook:
    usage: dict[Key, Usage] = field(default_factory=dict)

    def keys_of(self, namespace: str, tool: str, caller: str, per_caller: bool) -> Iterator[Key]:
        yield (namespace, tool, "")
        if per_caller:
            yield (namespace, tool, caller)

    def observe(
        self,
        *,
        uid: str,
        namespace: str,
        tool: str,
        caller: str,
        started: datetime | None,
        running: bool,
        now: datetime,
    ) -> None:
        """What the watch shows of one invocation (idempotent). Starts older than the
        window are not kept unless the call still runs: finished history costs nothing."""
        if started is not None and now - started >= WINDOW and not running:
            started = None
        for key in ((namespace, tool, ""), (namespace, tool, caller)):
            usage = self.usage.get(key)
            if started is None and usage is None:
                continue
            usage = self.usage.setdefault(key, Usage())
            if started is not None:
                usage.starts.setdefault(uid, started)
            if running:
                usage.running.add(uid)
            else:
                usage.running.discard(uid)

    def admit(
        self,
        *,
        uid: str,
        namespace: str,
        tool: str,
        caller: str,
        per_caller: bool,
        per_minute: int | None,
        concurrency: int | None,
        now: datetime,
    ) -> Verdict:
        """Check every applicable limit and, if all allow, count the start."""
        if per_minute is None and concurrency is None:
            return Verdict(True)
        keys = list(self.keys_of(namespace, tool, caller, per_caller))
        for key in keys:
            usage = self.usage.setdefault(key, Usage())
            usage.prune(now)
            if uid in usage.starts:
                continue  # this call was counted already (a resumed flow)
            who = f"caller {caller}" if key[2] else f"namespace {namespace}"
            if concurrency is not None and len(usage.running) >= concurrency:
                return Verdict(
                    False,
                    f"{tool}: {len(usage.running)} calls of {who} are running; "
                    f"rateLimits.concurrency is {concurrency}",
                    retry_after_seconds=1,
                )
            recent = sorted(usage.starts.values())
            if per_minute is not None and len(recent) >= per_minute:
                oldest = recent[len(recent) - per_minute]
                wait = max(1, int((oldest + WINDOW - now).total_seconds()) + 1)
                return Verdict(
                    False,
                    f"{tool}: {len(recent)} calls of {who} started in the last minute; "
                    f"rateLimits.perMinute is {per_minute}",
                    retry_after_seconds=wait,
                )
        for key in keys:
            usage = self.usage[key]
            usage.starts.setdefault(uid, now)
            usage.running.add(uid)
        return Verdict(True)

    def release(self, uid: str) -> None:
        """The call ended: it no longer counts as running (its start still counts)."""
        for usage in self.usage.values():
            usage.running.discard(uid)
