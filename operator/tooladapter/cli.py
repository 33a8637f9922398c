"""`tooladapter`: the command line (also `python -m tooladapter`).

`run` starts the operator; the reviewers' and operators' commands (approve, confirm,
receipts) join here with the gateway.
"""

from __future__ import annotations

import argparse
import sys
from importlib.metadata import PackageNotFoundError, version


def _version() -> str:
    try:
        return version("tooladapter")
    except PackageNotFoundError:
        return "unknown"


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog="tooladapter",
        description="The governed gateway through which AI agents call tools.",
    )
    top.add_argument("--version", action="version", version=f"tooladapter {_version()}")
    commands = top.add_subparsers(dest="command", metavar="COMMAND", required=True)
    run = commands.add_parser(
        "run",
        help="run the operator against the cluster of KUBECONFIG (or in-cluster)",
        description="Run the operator. Settings come from TOOLADAPTER_* environment "
        "variables (see the README); TOOLADAPTER_NAMESPACES limits it to namespace globs. "
        "Options after `--` go to `kopf run`.",
    )
    run.add_argument("kopf_args", nargs=argparse.REMAINDER, help="extra `kopf run` options")
    commands.add_parser(
        "egress-proxy",
        help="run the lease-scoped egress proxy sandboxes reach host names through",
        description="Run the egress proxy (its own process, never the operator's). Settings "
        "come from TOOLADAPTER_EGRESS_* environment variables (see the README's Egress).",
    )
    return top


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(sys.argv[1:] if argv is None else argv)
    if args.command == "run":
        from .launcher import run

        extra = [a for a in args.kopf_args if a != "--"]
        run(extra)
    elif args.command == "egress-proxy":
        from .egress.main import main as egress_main

        egress_main()


if __name__ == "__main__":
    main()
