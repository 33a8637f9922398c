"""Per-file run times of the integration suite, from the JUnit report `make integration`
writes, into `tests/integration/durations.json`.

The suite runs a file per worker at a time (`--dist loadfile`); started longest first, the
last files to finish are short ones and the workers end together. Run after a whole
integration run and commit the file when the times have moved:

    python hack/test_durations.py .cluster/integration-junit.xml
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "integration" / "durations.json"


def per_file(report: Path) -> dict[str, float]:
    """Seconds per test file (setup, call and teardown of each of its tests)."""
    seconds: dict[str, float] = defaultdict(float)
    for case in ET.parse(report).getroot().iter("testcase"):
        module = case.get("classname", "")
        # "tests.integration.flow.test_calls" or "...test_calls.TestClass"
        parts = module.split(".")
        while parts and not parts[-1].startswith("test_"):
            parts.pop()
        if parts:
            seconds["/".join(parts) + ".py"] += float(case.get("time") or 0)
    return {name: round(value, 1) for name, value in sorted(seconds.items())}


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    OUT.write_text(json.dumps(per_file(Path(argv[1])), indent=1) + "\n")
    print(f"wrote {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
