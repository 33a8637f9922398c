"""Checking receipt bytes against their content reference.

The operator stores each receipt as its RFC 8785 canonical JSON under
`sha256:<hex of those bytes>`, so the bytes prove themselves. Bytes that were re-encoded
on the way (pretty-printed, keys reordered) still verify when their canonical form hashes
to the reference; the verdict says which of the two matched.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum
from pathlib import PurePath
from typing import Any

from tooladapter.pipeline.hashing import (
    SHA256_PREFIX,
    CanonicalizationError,
    canonical_json,
    sha256_ref,
)
from tooladapter.receipts.core.signing import loads_unique, receipt_of


class Match(StrEnum):
    BYTES = "bytes"
    CANONICAL = "canonical"
    NONE = "none"


@dataclass(frozen=True)
class Verdict:
    expected: str
    actual: str
    match: Match

    @property
    def ok(self) -> bool:
        return self.match is not Match.NONE

    def wire(self) -> dict[str, Any]:
        return {
            "verified": self.ok,
            "expected": self.expected,
            "actual": self.actual,
            "match": self.match.value,
        }


def _json_object(data: bytes) -> dict[str, Any] | None:
    try:
        value = loads_unique(data)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def parse_receipt(data: bytes) -> dict[str, Any] | None:
    """The receipt in stored bytes: a signed receipt's predicate (`signing`), or the JSON of
    a plain (unsigned, so invalid) one, to show what it claims."""
    return receipt_of(data)


def verify(data: bytes, expected: str) -> Verdict:
    actual = sha256_ref(data)
    if actual == expected:
        return Verdict(expected, actual, Match.BYTES)
    parsed = _json_object(data)
    if parsed is not None:
        try:
            if sha256_ref(canonical_json(parsed)) == expected:
                return Verdict(expected, actual, Match.CANONICAL)
        except CanonicalizationError:
            pass
    return Verdict(expected, actual, Match.NONE)


_HEX_NAME = re.compile(r"^[0-9a-f]{64}$")


def ref_from_filename(path: str) -> str | None:
    """The reference a file of the artifact store carries in its name (`.../<64 hex>`)."""
    name = PurePath(path).name.removesuffix(".json")
    return SHA256_PREFIX + name if _HEX_NAME.match(name) else None
