"""`python -m tooladapter run`: the operator, one active replica (kopf --standalone)."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] != "run":
        print("usage: python -m tooladapter run [kopf run options]", file=sys.stderr)
        raise SystemExit(2)
    from kopf.cli import main as kopf_main

    sys.argv = [
        "kopf",
        "run",
        "--standalone",
        "--all-namespaces",
        "-m",
        "tooladapter.main",
        *args[1:],
    ]
    kopf_main()


if __name__ == "__main__":
    main()
