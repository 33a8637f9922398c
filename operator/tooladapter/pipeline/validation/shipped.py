"""The admission policies as shipped, compared with what the cluster holds: identity fails closed.

Who a call runs as rests on the admission policies alone (`manifests/admission/`): with the
caller binding missing (deleted, pruned by a GitOps sync) an agent's `spec.caller` of its
choice, groups included, would be believed. So the operator carries a digest of every
policy's and binding's spec as shipped (`shipped_digests`, generated from the manifests by
`hack/admission_digests.py`; the chart renders the same specs) and compares the cluster's
with them at start and on every change. While one is missing, changed or cannot be read, no
call passes validation; and a call created during such a gap is refused after it closes
too, since nothing verified who created it (`AdmissionGuard`).

A digest is of the spec in a canonical form: the API server's defaults filled in (it stores
`matchPolicy: Equivalent`, empty selectors and `scope: "*"` the manifests leave out), white
space runs as one space (see `_renamed`), and the
names a release chooses (the chart's `prefix`, the operator's ServiceAccount in the release
namespace) put back to the shipped ones, so the chart's rendering and the manifests give the
same digest and a second release verifies its own objects.
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from tooladapter.enums import AdmissionFault, AdmissionKind
from tooladapter.pipeline.hashing import canonical_json
from tooladapter.pipeline.validation.shipped_digests import SHIPPED
from tooladapter.timeutil import to_iso

#: The names as `manifests/` ships them (the chart's default `prefix`, `make install`).
SHIPPED_PREFIX = "tooladapter"
SHIPPED_OPERATOR = "system:serviceaccount:tooladapter-system:tooladapter-operator"

#: Clock difference allowed between the API server (creationTimestamp) and this process
#: (when it saw a change), and the watch's delay: a gap is widened by this on both sides.
CLOCK_SLACK = timedelta(seconds=2)
#: Gaps remembered; beyond, the oldest two merge into one span (wider, never dropped).
MAX_GAPS = 64
#: The beginning of a gap whose beginning is unknown (no comparison found everything intact
#: before it).
EARLIEST = datetime.min.replace(tzinfo=UTC)

Key = tuple[AdmissionKind, str]


def deployed_name(name: str, prefix: str) -> str:
    """A shipped object's name under the release's `prefix` (what sync_chart renders)."""
    return f"{prefix}-{name.removeprefix(SHIPPED_PREFIX + '-')}"


def operator_user(namespace: str, prefix: str) -> str:
    """The operator's ServiceAccount as the policies name it (the metadata exemption)."""
    return f"system:serviceaccount:{namespace}:{prefix}-operator"


def _fill(target: dict[str, Any], defaults: Mapping[str, Any]) -> None:
    for key, value in defaults.items():
        target.setdefault(key, copy.deepcopy(value))


def _match_defaults(match: dict[str, Any]) -> None:
    """What the API server stores in a policy's matchConstraints (a binding's matchResources)."""
    _fill(match, {"matchPolicy": "Equivalent", "namespaceSelector": {}, "objectSelector": {}})
    for rules in ("resourceRules", "excludeResourceRules"):
        for rule in match.get(rules) or []:
            if isinstance(rule, dict):
                rule.setdefault("scope", "*")


def _renamed(value: Any, user: str) -> Any:
    """Every string with the release's operator user spelled as shipped, and each run of
    white space as one space: YAML parsers fold a block scalar's more-indented lines
    differently (PyYAML keeps one line break where Go's parser, kubectl's and Helm's, keeps
    two), and white space changes no CEL expression of ours (their string literals hold
    none that matters)."""
    if isinstance(value, str):
        return " ".join(value.replace(user, SHIPPED_OPERATOR).split())
    if isinstance(value, list):
        return [_renamed(v, user) for v in value]
    if isinstance(value, dict):
        return {k: _renamed(v, user) for k, v in value.items()}
    return value


def canonical_spec(
    kind: AdmissionKind,
    spec: Mapping[str, Any],
    *,
    prefix: str = SHIPPED_PREFIX,
    namespace: str = "tooladapter-system",
) -> dict[str, Any]:
    """`spec` with the API server's defaults and the shipped names (see the module)."""
    out: dict[str, Any] = _renamed(copy.deepcopy(dict(spec)), operator_user(namespace, prefix))
    if kind is AdmissionKind.POLICY:
        out.setdefault("failurePolicy", "Fail")
        if isinstance(out.get("matchConstraints"), dict):
            _match_defaults(out["matchConstraints"])
    else:
        policy = out.get("policyName")
        if isinstance(policy, str) and policy.startswith(prefix + "-"):
            out["policyName"] = f"{SHIPPED_PREFIX}-{policy.removeprefix(prefix + '-')}"
        if isinstance(out.get("matchResources"), dict):
            _match_defaults(out["matchResources"])
    return out


def spec_digest(
    kind: AdmissionKind,
    spec: Mapping[str, Any],
    *,
    prefix: str = SHIPPED_PREFIX,
    namespace: str = "tooladapter-system",
) -> str:
    canonical = canonical_spec(kind, spec, prefix=prefix, namespace=namespace)
    return "sha256:" + hashlib.sha256(canonical_json(canonical)).hexdigest()


@dataclass(frozen=True)
class Observed:
    """One admission object as the cluster holds it."""

    spec: Mapping[str, Any]
    #: Its creationTimestamp: a recreated object was absent before it.
    created: datetime | None = None


@dataclass(frozen=True)
class Problem:
    kind: AdmissionKind
    #: The name in the cluster (under the release's prefix).
    name: str
    fault: AdmissionFault

    def text(self) -> str:
        return f"{self.kind} {self.name} is {self.fault}"


def shipped_keys(prefix: str) -> list[Key]:
    """Every object the operator verifies, by its name in the cluster."""
    return [(kind, deployed_name(name, prefix)) for kind, name in SHIPPED]


def compare(
    observed: Mapping[Key, Observed],
    *,
    prefix: str = SHIPPED_PREFIX,
    namespace: str = "tooladapter-system",
    shipped: Mapping[Key, str] = SHIPPED,
) -> tuple[Problem, ...]:
    """What is missing or changed among the `shipped` objects (empty: all intact)."""
    problems: list[Problem] = []
    for (kind, name), digest in sorted(shipped.items()):
        here = deployed_name(name, prefix)
        seen = observed.get((kind, here))
        if seen is None:
            problems.append(Problem(kind, here, AdmissionFault.MISSING))
        elif spec_digest(kind, seen.spec, prefix=prefix, namespace=namespace) != digest:
            problems.append(Problem(kind, here, AdmissionFault.CHANGED))
    return tuple(problems)


def unreadable(prefix: str) -> tuple[Problem, ...]:
    """Every shipped object, as unknown (a failed listing)."""
    return tuple(
        Problem(kind, name, AdmissionFault.UNREADABLE) for kind, name in shipped_keys(prefix)
    )


@dataclass(frozen=True)
class Gap:
    """A span in which some shipped object was missing, changed or unreadable."""

    start: datetime
    end: datetime | None
    problems: tuple[Problem, ...]


@dataclass
class AdmissionGuard:
    """Whether calls may pass validation, from the comparisons seen so far.

    Fails closed: until the first comparison (`observe`) nothing passes. A call passes when
    everything is intact now and the call was created neither inside a gap this process saw
    (widened by `CLOCK_SLACK`) nor before the newest creationTimestamp of a shipped object
    (a recreated binding was absent before it: this holds across operator restarts, when
    the gaps in memory are gone).

    A gap begins at the last comparison that found everything intact, not when the break
    was seen: the break happened at some moment between the two, and a watch may be slow
    or stalled until the next re-list (`relist_seconds`). Begun at the sighting, a gap let a
    call created after an edit (validationActions set to Warn: no new creationTimestamp)
    but before the sighting run once the edit was undone. A process that never saw
    everything intact knows no beginning: its first gap covers everything before."""

    #: None: not compared yet.
    problems: tuple[Problem, ...] | None = None
    gaps: list[Gap] = field(default_factory=list)
    #: The newest creationTimestamp among the shipped objects, and which one it is.
    newest: tuple[datetime, Key] | None = None
    slack: timedelta = CLOCK_SLACK
    #: When a comparison last found everything intact (this process's clock): a gap that
    #: opens after it may have begun any time since.
    intact_at: datetime | None = None

    @property
    def intact(self) -> bool:
        return self.problems == ()

    def observe(
        self, problems: Iterable[Problem], *, at: datetime, observed: Mapping[Key, Observed]
    ) -> None:
        """One comparison's result, seen at `at` (this process's clock)."""
        problems = tuple(problems)
        was_intact = self.intact
        if problems and (was_intact or self.problems is None):
            # A gap opens, from the last sighting of everything intact: the break came at
            # some moment since. At start, or never seen intact, from the beginning of
            # time (what happened before is unknown; the creationTimestamp rule below
            # covers what a restart forgot of a recreated object).
            since = self.intact_at - self.slack if self.intact_at is not None else EARLIEST
            self.gaps.append(Gap(since, None, problems))
        elif problems and self.gaps and self.gaps[-1].end is None:
            last = self.gaps[-1]
            merged = tuple(dict.fromkeys(last.problems + problems))
            self.gaps[-1] = Gap(last.start, None, merged)
        elif not problems and self.gaps and self.gaps[-1].end is None:
            last = self.gaps[-1]
            self.gaps[-1] = Gap(last.start, at + self.slack, last.problems)
        while len(self.gaps) > MAX_GAPS:
            first, second = self.gaps[0], self.gaps[1]
            self.gaps[:2] = [Gap(first.start, second.end, first.problems + second.problems)]
        self.problems = problems
        if not problems:
            self.intact_at = at
        newest = [(seen.created, key) for key, seen in observed.items() if seen.created is not None]
        self.newest = max(newest, key=lambda pair: pair[0]) if newest else self.newest

    def refusal(self, created: datetime) -> str | None:
        """Why a call created at `created` may not pass validation (None: it may)."""
        if self.problems is None:
            return (
                "the operator has not yet verified the admission policies that vouch for "
                "spec.caller; nothing runs until it has: make the call again"
            )
        if self.problems:
            named = "; ".join(p.text() for p in self.problems)
            return (
                f"identity is not verified: {named}, so spec.caller may not be who created "
                "this call; nothing runs until the admission policies are restored as shipped "
                "(`make install` or the chart), then make the call again"
            )
        for gap in reversed(self.gaps):
            if gap.start <= created and (gap.end is None or created < gap.end):
                named = "; ".join(p.text() for p in gap.problems)
                until = to_iso(gap.end) if gap.end else "now"
                since = (
                    f"from {to_iso(gap.start)}"
                    if gap.start > EARLIEST
                    else "since before the operator first verified them"
                )
                return (
                    f"this call was created at {to_iso(created)}, while {named} ({since} "
                    f"to {until}), so who created it was not verified; it runs nothing: make "
                    "the call again"
                )
        if self.newest is not None and created <= self.newest[0]:
            _, (kind, name) = self.newest
            return (
                f"this call was created at {to_iso(created)}, before {kind} {name} "
                f"was (re)created at {to_iso(self.newest[0])}, so who created it was not "
                "verified; it runs nothing: make the call again"
            )
        return None
