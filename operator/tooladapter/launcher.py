"""Launching the operator: kopf's runner over `tooladapter.main`.

kopf runs `--standalone` (no kopf.dev peering): one operator per namespace set is active
through the leadership Lease taken at start-up (`handlers.leadership`)."""

from __future__ import annotations

import sys

from .settings import Settings


def run(extra: list[str]) -> None:
    # kopf imports the synchronous `kubernetes` client, when installed, only to recognise its
    # model types and to log in through it. The operator uses kubernetes_asyncio alone (kopf
    # logs in through that as well): not loading it keeps ~14 MB out of the operator's RSS.
    sys.modules.setdefault("kubernetes", None)  # type: ignore[arg-type]
    from kopf.cli import main as kopf_main

    # TOOLADAPTER_NAMESPACES (comma-separated globs) shards the operator by namespace; the
    # same setting tells the workers which namespaces are theirs (`Settings.serves`).
    patterns = Settings.from_env().namespaces
    scope = [f"--namespace={p}" for p in patterns] or ["--all-namespaces"]
    sys.argv = ["kopf", "run", "--standalone", *scope, "-m", "tooladapter.main", *extra]
    kopf_main()
