"""Shell completion of names from the cluster: tools, waiting calls, Uncertain calls.

Completion must never hang a shell or print errors into it: each lookup is bounded and
any failure completes nothing."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import click
from click.shell_completion import CompletionItem

from tooladapter.cli import views
from tooladapter.cli.context import Settings
from tooladapter.enums import InvocationState, Resource

#: Longest a completion may wait for the API server.
COMPLETION_SECONDS = 3.0

Completer = Callable[[click.Context, click.Parameter, str], list[CompletionItem]]


def _objects(ctx: click.Context, plural: str) -> list[dict[str, Any]]:
    settings = ctx.find_object(Settings) or Settings()

    async def fetch() -> list[dict[str, Any]]:
        async with asyncio.timeout(COMPLETION_SECONDS), settings.connect() as api:
            return await api.list_all(plural)

    try:
        return asyncio.run(fetch())
    except Exception:  # completion shows nothing rather than a traceback
        return []


def tool_ids(ctx: click.Context, _param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    descriptors = views.callable_descriptors(_objects(ctx, Resource.DESCRIPTORS))
    ids = sorted({str((d.get("spec") or {}).get("toolId")) for d in descriptors})
    return [CompletionItem(i) for i in ids if i.startswith(incomplete)]


def invocations_in(state: InvocationState) -> Completer:
    def complete(
        ctx: click.Context, _param: click.Parameter, incomplete: str
    ) -> list[CompletionItem]:
        names = [
            str((o.get("metadata") or {}).get("name"))
            for o in _objects(ctx, Resource.INVOCATIONS)
            if (o.get("status") or {}).get("state") == state
        ]
        return [CompletionItem(n) for n in sorted(names) if n.startswith(incomplete)]

    return complete


def ended_invocations(
    ctx: click.Context, _param: click.Parameter, incomplete: str
) -> list[CompletionItem]:
    """Calls with a result to read (`status.resultRef`)."""
    names = [
        str((o.get("metadata") or {}).get("name"))
        for o in _objects(ctx, Resource.INVOCATIONS)
        if (o.get("status") or {}).get("resultRef")
    ]
    return [CompletionItem(n) for n in sorted(names) if n.startswith(incomplete)]
