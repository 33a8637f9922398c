"""Request hashes and digests: canonical, stable, sensitive to every field."""

from __future__ import annotations

import json
import random
from enum import StrEnum
from typing import Any

import pytest
import rfc8785
from hypothesis import given, settings
from hypothesis import strategies as st

from tooladapter.pipeline.hashing import (
    CanonicalizationError,
    canonical_json,
    descriptor_digest,
    digest,
    request_hash,
    sha256_ref,
)

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**53) + 1, max_value=2**53 - 1)
    | st.floats(allow_nan=False, allow_infinity=False, width=64)
    | st.text(max_size=20)
)
json_values = st.recursive(
    json_scalars,
    lambda children: (
        st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=10), children, max_size=5)
    ),
    max_leaves=20,
)


def _shuffled(value: Any, rng: random.Random) -> Any:
    if isinstance(value, dict):
        items = list(value.items())
        rng.shuffle(items)
        return {k: _shuffled(v, rng) for k, v in items}
    if isinstance(value, list):
        return [_shuffled(v, rng) for v in value]
    return value


def _dump_with_random_whitespace(value: Any, rng: random.Random) -> str:
    indent = rng.choice([None, 0, 1, 2, 4, "\t"])
    separators = rng.choice([(",", ":"), (", ", ": "), (" ,", " : "), (",\n", ":\t")])
    return json.dumps(value, indent=indent, separators=separators, ensure_ascii=rng.random() < 0.5)


@settings(max_examples=80, deadline=None)
@given(arguments=st.dictionaries(st.text(max_size=10), json_values, max_size=6), seed=st.integers())
def test_request_hash_is_stable_under_key_order_and_whitespace(
    arguments: dict[str, Any], seed: int
) -> None:
    rng = random.Random(seed)
    respelled = json.loads(_dump_with_random_whitespace(_shuffled(arguments, rng), rng))
    common = {"namespace": "team-a", "tool_id": "deploy", "tool_version": "1.0.0"}
    assert request_hash(arguments=arguments, **common) == request_hash(
        arguments=respelled, **common
    )


def test_request_hash_is_sha256_of_the_canonical_json_of_the_four_fields() -> None:
    expected = sha256_ref(
        b'{"arguments":{"a":1,"b":[true,null]},"namespace":"ns","toolId":"t","toolVersion":"1.0.0"}'
    )
    got = request_hash(
        namespace="ns", tool_id="t", tool_version="1.0.0", arguments={"b": [True, None], "a": 1}
    )
    assert got == expected
    assert got.startswith("sha256:") and len(got) == len("sha256:") + 64


@pytest.mark.parametrize(
    "change",
    [
        {"namespace": "team-b"},
        {"tool_id": "deploy2"},
        {"tool_version": "1.0.1"},
        {"arguments": {"env": "prod", "extra": 1}},
        {"arguments": {"env": "Prod"}},
    ],
)
def test_request_hash_changes_when_any_field_changes(change: dict[str, Any]) -> None:
    base: dict[str, Any] = {
        "namespace": "team-a",
        "tool_id": "deploy",
        "tool_version": "1.0.0",
        "arguments": {"env": "prod"},
    }
    assert request_hash(**base) != request_hash(**{**base, **change})


def test_numbers_hash_by_value_not_spelling() -> None:
    assert digest({"n": 1.0}) == digest({"n": 1})
    assert canonical_json({"b": 1, "a": "é"}) == '{"a":"é","b":1}'.encode()


# Every character class the fast path must spell as RFC 8785 does: controls (short and \u00xx
# escapes), quotes, backslashes, DEL, line separators, non-ASCII and supplementary planes.
tricky_text = st.text(
    alphabet=st.sampled_from(
        [
            *("a", "Z", "0", " ", '"', "\\", "/", "\x00", "\x1f", "\x7f", "\b", "\f", "\n"),
            *("\r", "\t", "é", "\u2028", "\ufeff", "\uffff", "\U0001f600", "\U0010ffff", "ß", "中"),
        ]
    ),
    max_size=8,
)
tricky_values = st.recursive(
    json_scalars | tricky_text | st.integers(min_value=-(2**60), max_value=2**60),
    lambda children: (
        st.lists(children, max_size=4)
        | st.tuples(children, children)
        | st.dictionaries(tricky_text | st.text(max_size=6), children, max_size=5)
    ),
    max_leaves=25,
)


def assert_spelled_as_rfc8785(value: Any) -> None:
    """Same bytes as `rfc8785.dumps`, or the same refusal."""
    try:
        expected = rfc8785.dumps(value)
    except (ValueError, TypeError):
        with pytest.raises(CanonicalizationError):
            canonical_json(value)
        return
    assert canonical_json(value) == expected


@settings(max_examples=400, deadline=None)
@given(value=tricky_values)
def test_canonical_json_is_byte_for_byte_the_rfc8785_library_s(value: Any) -> None:
    """The fast path (json.dumps on plain values) never changes a hash: same bytes as
    `rfc8785.dumps`, or the same refusal."""
    assert_spelled_as_rfc8785(value)


@pytest.mark.parametrize(
    "value",
    [
        # Keys that code points and UTF-16 units sort differently ("\U0001f600" < "\uff5e"
        # in UTF-16): the fast path must not take them.
        {"\U0001f600": 1, "\uff5e": 2, "a": 3},
        {"k": "\ud800"},  # a lone surrogate: no UTF-8 form
        {"n": 2**53 - 1, "m": -(2**53) + 1},
        {"n": 2**53},
        {"f": 1.0, "g": 1e21, "h": 1e-7},
        [True, False, None, "\x00\x1f\u007f"],
    ],
)
def test_canonical_json_edge_cases_match_the_rfc8785_library(value: Any) -> None:
    assert_spelled_as_rfc8785(value)


class _Unordered(str):
    """A str that lies about itself (Python-only: no agent's JSON gives one)."""

    def isascii(self) -> bool:
        return True

    def __lt__(self, other: object) -> bool:
        return not str.__lt__(self, str(other))


class _Renumbered(int):
    def __int__(self) -> int:
        return 7


class _OtherItems(dict[str, Any]):
    def items(self) -> Any:
        return [("z", 1)]


class _Rehashed(StrEnum):
    """An enum key with its own hash and order: the same text twice in one dict."""

    A = "b"

    def __hash__(self) -> int:
        return hash(self._name_)

    def __lt__(self, other: object) -> bool:
        return str.__gt__(self, str(other))


class _Plain(StrEnum):
    A = "a"
    B = "\x00\u2028"


def _nested(depth: int) -> Any:
    return json.loads("[" * depth + "]" * depth)


@pytest.mark.parametrize(
    "value",
    [
        # Attack-pass hits on the first fast path: nesting that exhausted its recursive walk
        # (json.loads gives it), and subclasses that order, convert or iterate otherwise.
        _nested(600),
        json.loads('{"a":' * 600 + "1" + "}" * 600),
        {_Unordered("b"): 2, _Unordered("a"): 1},
        {_Unordered("\U0001f600"): 1, _Unordered("\uff61"): 2},
        [_Renumbered(5)],
        _OtherItems(a=1),
        {"shared": (shared := {"k": "v"}), "again": shared},
        # Second attack pass: str enum keys that redefine hashing and ordering.
        {"b": 2, _Rehashed.A: 1},
        {"b": [], _Rehashed.A: {}},
        {"a": _Rehashed.A, "b": [_Plain.A, _Plain.B]},
    ],
)
def test_what_the_fast_path_must_not_take_is_still_spelled_as_rfc8785(value: Any) -> None:
    assert_spelled_as_rfc8785(value)


def test_a_cycle_raises_instead_of_hanging() -> None:
    cycle: list[Any] = []
    cycle.append(cycle)
    with pytest.raises((RecursionError, CanonicalizationError)):
        canonical_json(cycle)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), 2**60, {1: "x"}, {"s": {1, 2}}])
def test_values_without_a_canonical_form_raise_a_clear_error(bad: Any) -> None:
    with pytest.raises(CanonicalizationError, match="canonical JSON"):
        canonical_json(bad)


async def test_a_descriptor_version_is_digested_once_and_a_changed_one_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The digest (RFC 8785 in pure Python) is derived once per descriptor version the
    catalog holds; a changed descriptor is a new version, digested anew (approvals unbind)."""
    from tests.unit.fake_cluster import descriptor, invocation, make_runtime
    from tooladapter.flow import context

    digested: list[str] = []
    real = descriptor_digest

    def counted(wire: dict[str, Any]) -> str:
        digested.append(real(wire))
        return digested[-1]

    monkeypatch.setattr(context, "descriptor_digest", counted)
    h = make_runtime()
    h.publish(descriptor("lister"))
    h.cluster.grant(tools=["lister"], classes=["read"])
    first = [(await h.run(h.submit(invocation(f"c{i}"))))["status"] for i in range(3)]
    assert len(digested) == 1
    assert {s["descriptorDigest"] for s in first} == {digested[0]}

    h.publish(descriptor("lister", description="changed", timeoutSeconds=61))
    later = (await h.run(h.submit(invocation("c3"))))["status"]
    assert len(digested) == 2
    assert later["descriptorDigest"] == digested[1] != digested[0]
