"""`python -m tooladapter run`: the operator, one active replica (kopf --standalone)."""

from __future__ import annotations

import os
import sys


def main(argv: list[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] != "run":
        print("usage: python -m tooladapter run [kopf run options]", file=sys.stderr)
        raise SystemExit(2)
    # kopf imports the synchronous `kubernetes` client, when installed, only to recognise its
    # model types and to log in through it. The operator uses kubernetes_asyncio alone (kopf
    # logs in through that as well): not loading it keeps ~14 MB out of the operator's RSS.
    sys.modules.setdefault("kubernetes", None)  # type: ignore[arg-type]
    from kopf.cli import main as kopf_main

    # TOOLADAPTER_NAMESPACES (comma-separated globs) shards the operator by namespace.
    patterns = [p.strip() for p in os.environ.get("TOOLADAPTER_NAMESPACES", "").split(",")]
    scope = [f"--namespace={p}" for p in patterns if p] or ["--all-namespaces"]
    sys.argv = [
        "kopf",
        "run",
        "--standalone",
        *scope,
        "-m",
        "tooladapter.main",
        *args[1:],
    ]
    kopf_main()


if __name__ == "__main__":
    main()
