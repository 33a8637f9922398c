"""`python -m bench adversarial`: what agent-crafted input costs the operator (no cluster).

Times, on this machine, the sanitizer over outputs crafted to be slow (the `seq -s // 1
40000` output that took detect-secrets' npm rule ~20 s, and a mebibyte of each repeated
prefix of a secret format), schema validation with patterns and keywords that are
exponential or quadratic elsewhere, and how long the event loop pauses while a large result
is sanitized on a worker thread. The unit tests assert the engine (RE2) and the outcomes;
the times are here. Writes `BENCH_REPORT` (default bench-adversarial.json) too.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tooladapter import offload
from tooladapter.pipeline import linear_regex
from tooladapter.pipeline.linear_regex import ENGINE
from tooladapter.pipeline.sanitize.results import sanitize
from tooladapter.pipeline.validation.arguments import validate_arguments

MiB = 1 << 20
SECRETS = ["s3cr3t-Pa55/word+=&?", "Brk-7Qz4vT9xLm2pRw8kHy6sBn4dJc5fGt7a-Pq1Wz3Ex5Rt7Yu9Io0Pa2Sd4"]
UNITS = [
    "//",
    "://a:",
    "://a:b@",
    "password=",
    "password=x ",
    'token="\\',
    "eyJabcd.eyJabcd.",
    "-----BEGIN PRIVATE KEY-----",
    "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n",
    "PuTTY-User-Key-File-2:",
    "authorization: bearer ",
    "sk-",
    "AKIA",
    "abc1Q~",
    "a",
    "%41",
    "\\u0041",
    "&#x41;",
    "\n",
]


def _repeat(unit: str, size: int = MiB) -> bytes:
    data = unit.encode()
    return (data * (size // len(data) + 1))[:size]


def _seconds(fn: Any, *args: Any, **kwargs: Any) -> float:
    start = time.perf_counter()
    fn(*args, **kwargs)
    return time.perf_counter() - start


def sanitizer() -> list[dict[str, Any]]:
    seq = "//".join(str(i) for i in range(1, 40001)).encode() + b"\n"
    rows = []
    for name, data in [("seq -s // 1 40000", seq)] + [
        (f"1 MiB of {u!r}", _repeat(u)) for u in UNITS
    ]:
        for secrets in ([], SECRETS):
            seconds = _seconds(sanitize, data, secrets=secrets, max_bytes=MiB)
            rows.append(
                {"input": name, "bytes": len(data), "secrets": len(secrets), "ms": seconds * 1000}
            )
    return rows


def _python_re_seconds(pattern: str, text: str, limit: float) -> float | None:
    """Python `re` on the same pattern, in a subprocess killed after `limit` seconds."""
    code = (
        "import re, sys, time\n"
        f"t = time.perf_counter(); re.search({pattern!r}, {text!r}); "
        "print(time.perf_counter() - t)\n"
    )
    try:
        done = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=limit
        )
    except subprocess.TimeoutExpired:
        return None
    return float(done.stdout.strip())


def validation() -> list[dict[str, Any]]:
    string = {"type": "object", "properties": {"s": {"type": "string", "pattern": "^(a|aa)*$"}}}
    cases = [
        ("pattern ^(a|aa)*$, 200,000 a + b", string, {"s": "a" * 200_000 + "b"}),
        (
            "uniqueItems, 20,000 objects",
            {"type": "object", "properties": {"a": {"type": "array", "uniqueItems": True}}},
            {"a": [{"k": i} for i in range(20_000)]},
        ),
        (
            "unevaluatedItems, 60,000 items",
            {
                "type": "object",
                "properties": {"a": {"type": "array", "prefixItems": [{}], "unevaluatedItems": {}}},
            },
            {"a": list(range(60_000))},
        ),
        (
            "unevaluatedProperties, 20,000 keys",
            {"type": "object", "properties": {"x": {}}, "unevaluatedProperties": {}},
            {str(i): i for i in range(20_000)},
        ),
        (
            "50,000 type errors",
            {"type": "object", "properties": {"a": {"type": "array", "items": {"type": "string"}}}},
            {"a": [0] * 50_000},
        ),
    ]
    rows = []
    for name, schema, arguments in cases:
        seconds = _seconds(validate_arguments, schema, arguments)
        rows.append({"case": name, "ms": seconds * 1000})
    for n in (24, 28, 32):
        python = _python_re_seconds("^(a|aa)*$", "a" * n + "b", limit=30)
        rows.append(
            {
                "case": f"Python re, ^(a|aa)*$ on {n} a + b (for comparison)",
                "ms": None if python is None else python * 1000,
                "note": "killed after 30 s" if python is None else "",
            }
        )
    return rows


async def _loop_pause(data: bytes) -> dict[str, float]:
    """The longest pause of a 1 ms ticker on the event loop while `data` is sanitized."""
    pauses: list[float] = []
    done = asyncio.Event()

    async def ticker() -> None:
        last = time.perf_counter()
        while not done.is_set():
            await asyncio.sleep(0.001)
            now = time.perf_counter()
            pauses.append(now - last)
            last = now

    task = asyncio.create_task(ticker())
    start = time.perf_counter()
    await offload.run("bench", len(data), sanitize, data, secrets=SECRETS, max_bytes=MiB)
    elapsed = time.perf_counter() - start
    done.set()
    await task
    return {"sanitize_s": elapsed, "max_loop_pause_ms": max(pauses) * 1000}


def loop() -> list[dict[str, Any]]:
    rows = []
    for unit in ("%41", "password=x ", "eyJabcd.eyJabcd."):
        row = asyncio.run(_loop_pause(_repeat(unit)))
        rows.append({"input": f"1 MiB of {unit!r} on a worker", **row})
    return rows


def gil() -> dict[str, float]:
    """Whether RE2 releases the GIL: the main thread's longest pause during a long match."""
    import threading

    text = ("ab" * 2_000_000 + "c").encode()
    regex = linear_regex.compile_internal("((?:a|ab|b)*)(b*)c")
    alone = _seconds(regex.search, text)
    finished = threading.Event()
    worker = threading.Thread(target=lambda: (regex.search(text), finished.set()))
    gaps: list[float] = []
    last = time.perf_counter()
    worker.start()
    while not finished.is_set():
        now = time.perf_counter()
        gaps.append(now - last)
        last = now
    worker.join()
    return {"match_s": alone, "main_thread_max_pause_ms": max(gaps) * 1000}


def main() -> None:
    report = {
        "engine": ENGINE,
        "python": sys.version.split()[0],
        "cpus": os.cpu_count(),
        "sanitizer": sanitizer(),
        "validation": validation(),
        "event_loop": loop(),
        "gil": gil(),
    }
    print(f"engine {ENGINE}; GIL released during a match: {report['gil']}")
    print(f"{'sanitize input':52} {'secrets':>7} {'ms':>9}")
    for row in report["sanitizer"]:
        print(f"{row['input'][:52]:52} {row['secrets']:>7} {row['ms']:>9.1f}")
    print(f"\n{'validation':60} {'ms':>9}")
    for row in report["validation"]:
        ms = "-" if row["ms"] is None else f"{row['ms']:.1f}"
        print(f"{row['case'][:60]:60} {ms:>9} {row.get('note', '')}")
    print(f"\n{'event loop while sanitizing':40} {'sanitize s':>10} {'max pause ms':>12}")
    for row in report["event_loop"]:
        print(
            f"{row['input'][:40]:40} {row['sanitize_s']:>10.3f} {row['max_loop_pause_ms']:>12.1f}"
        )
    path = Path(os.environ.get("BENCH_REPORT", "bench-adversarial.json"))
    path.write_text(json.dumps(report, indent=2) + "\n")
    print(f"report: {path}")
