"""Launching the operator: kopf's runner over `tooladapter.main`.

kopf runs `--standalone` (no kopf.dev peering): one operator per namespace set is active
through the leadership Lease taken at start-up (`handlers.leadership`)."""

from __future__ import annotations

import sys

from tooladapter import gateway, metrics
from tooladapter.settings import Settings

#: The API server accepts JSON nested 10,000 levels deep; kopf decodes every watch event
#: with `json.loads`, whose C decoder counts against the recursion limit. Below this an
#: invocation whose arguments nest ~1,000 deep (the admission policy bounds them at 32, but
#: it may be missing) raises RecursionError in the watch and stops the operator for every
#: tenant; above it the event decodes and validation denies the call.
RECURSION_LIMIT = 12_000
#: How long a thread that wants the GIL waits before the holder is asked to let go (Python's
#: default is 5 ms). Every call's end waits on the loop for a store thread's trip, and the
#: store's and the large jobs' threads (`offload`) take the GIL from the loop: at 5 ms each
#: hand-over could hold a call's end, or every other tenant's turn on the loop, that long.
SWITCH_INTERVAL_SECONDS = 0.001


def run(extra: list[str]) -> None:
    sys.setrecursionlimit(max(sys.getrecursionlimit(), RECURSION_LIMIT))
    sys.setswitchinterval(SWITCH_INTERVAL_SECONDS)
    # kopf imports the synchronous `kubernetes` client, when installed, only to recognise its
    # model types and to log in through it. The operator uses kubernetes_asyncio alone (kopf
    # logs in through that as well): not loading it keeps ~14 MB out of the operator's RSS.
    sys.modules.setdefault("kubernetes", None)  # type: ignore[arg-type]
    from kopf.cli import main as kopf_main

    from tooladapter.handlers import namespace_scan

    namespace_scan.install()

    # TOOLADAPTER_NAMESPACES (comma-separated globs) shards the operator by namespace; the
    # same setting tells the workers which namespaces are theirs (`Settings.serves`).
    settings = Settings.from_env()
    patterns = settings.namespaces
    try:
        metrics.listen(settings.metrics_port)
        gateway.check_port(settings)
    except (metrics.MetricsPortTaken, gateway.GatewayPortTaken) as exc:
        sys.stderr.write(f"tooladapter: {exc}\n")
        raise SystemExit(2) from None
    scope = [f"--namespace={p}" for p in patterns] or ["--all-namespaces"]
    sys.argv = ["kopf", "run", "--standalone", *scope, "-m", "tooladapter.main", *extra]
    kopf_main()
