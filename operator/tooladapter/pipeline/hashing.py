"""Content hashes: RFC 8785 canonical JSON and `sha256:<hex>` references.

Approvals bind to a request hash, MCP tools are pinned by schema digest, receipts and
results are stored by content hash. All of them must come out identical no matter how
the JSON was spelled (key order, whitespace, `1.0` vs `1`), so everything is hashed over
the RFC 8785 (JSON Canonicalization Scheme) form. `json.dumps` writes it only for values on
which the two provably agree (`_plain`); everything else goes through `rfc8785`.
"""

from __future__ import annotations

import hashlib
import json
from enum import Enum
from typing import Any

import rfc8785

SHA256_PREFIX = "sha256:"


class CanonicalizationError(ValueError):
    """A value that has no canonical JSON form (NaN, infinities, huge integers, non-JSON)."""


#: The integers RFC 8785 (I-JSON) carries exactly, as `rfc8785` bounds them.
_SAFE_INT = 2**53 - 1


def _is_text(value: Any) -> bool:
    # Exact types only, and str enum members as values (the encoder reads their characters,
    # whatever methods the enum redefines); any other subclass may spell otherwise.
    return type(value) is str or (isinstance(value, str) and isinstance(value, Enum))


def _plain(value: Any) -> bool:
    """Whether `json.dumps(sort_keys, compact, ensure_ascii=False)` spells `value` exactly as
    RFC 8785 does: strings, booleans, null, safe integers, lists and dicts with ASCII keys.

    On those the two agree byte for byte (the same escapes, `\\u00xx` in lower case; ASCII
    keys sort the same by code point as by UTF-16 unit); floats (ES6 number form), other keys
    and subclasses take `rfc8785`'s path. Iterative: an argument nested thousands deep must
    not exhaust the stack here; a container met twice (shared, or a cycle) leaves the
    judgement to rfc8785. rfc8785's pure-Python walk was ~9% of the operator's CPU per call."""
    pending = [value]
    seen: set[int] = set()
    while pending:
        item = pending.pop()
        kind = type(item)
        if item is None or kind is bool or _is_text(item):
            continue
        if kind is int:
            if not -_SAFE_INT <= item <= _SAFE_INT:
                return False
            continue
        if kind not in (list, tuple, dict) or id(item) in seen:
            return False
        seen.add(id(item))
        if kind is not dict:
            pending.extend(item)
        else:
            for key, member in item.items():
                # Keys: exact str only. json.dumps sorts by the keys' own `<` and `==`, which
                # an enum (or any subclass) may redefine.
                if type(key) is not str or not key.isascii():
                    return False
                pending.append(member)
    return True


def canonical_json(value: Any) -> bytes:
    """The RFC 8785 canonical JSON bytes of `value` (keys sorted, no whitespace, ES6 numbers).

    Raises `CanonicalizationError` for values JSON cannot carry exactly: NaN or infinite
    floats, integers beyond +-2**53 (not representable by an I-JSON number), non-string keys
    or non-JSON types.
    """
    if _plain(value):
        try:
            return json.dumps(
                value, sort_keys=True, separators=(",", ":"), ensure_ascii=False
            ).encode("utf-8")
        except (UnicodeEncodeError, RecursionError):
            pass  # a lone surrogate, or nesting deeper than the C encoder goes: rfc8785 decides
    try:
        return bytes(rfc8785.dumps(value))
    except (ValueError, TypeError) as err:
        raise CanonicalizationError(f"value has no canonical JSON form (RFC 8785): {err}") from err


def sha256_ref(data: bytes) -> str:
    """`sha256:<lower-case hex>` of `data`."""
    return SHA256_PREFIX + hashlib.sha256(data).hexdigest()


def digest(value: Any) -> str:
    """`sha256:<hex>` of the RFC 8785 canonical JSON of `value`."""
    return sha256_ref(canonical_json(value))


def request_hash(*, namespace: str, tool_id: str, tool_version: str, arguments: Any) -> str:
    """The request hash an approval binds to.

    sha256 of the RFC 8785 canonical JSON of
    `{"namespace", "toolId", "toolVersion", "arguments"}`; any change to any of the four
    gives a new hash, and so needs a new approval.
    """
    return digest(
        {
            "namespace": namespace,
            "toolId": tool_id,
            "toolVersion": tool_version,
            "arguments": arguments,
        }
    )


#: Descriptor fields that describe rather than define the tool: they may change freely
#: (`resultDelimiters` changes only how the gateway shows a result, never what runs).
DESCRIPTIVE_FIELDS = frozenset({"description", "releaseId", "resultDelimiters"})


def descriptor_digest(spec_wire: dict[str, Any]) -> str:
    """sha256 of the RFC 8785 form of a descriptor spec (camelCase wire form), without its
    descriptive fields: what an approval and a waiting call bind to besides the request."""
    return digest({k: v for k, v in spec_wire.items() if k not in DESCRIPTIVE_FIELDS})
