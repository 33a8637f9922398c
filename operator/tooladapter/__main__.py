"""`python -m tooladapter ...`: the same command line as `tooladapter ...`."""

from __future__ import annotations

from tooladapter.cli import main

if __name__ == "__main__":
    main()
