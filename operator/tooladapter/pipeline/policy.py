"""Tenant policy: the namespace's ToolPolicy objects evaluated into one recorded decision.

How several policies combine (the least surprising rules for a platform team, modelled
on how Kubernetes combines RBAC and NetworkPolicy objects):

- Deny wins: any deny-list entry or `deny` argument condition of any policy denies.
- Allow lists are additive: when at least one policy sets `tools.allow`, the tool must
  match an entry of some policy's allow list (as NetworkPolicy allow rules union).
- Ceilings, timeouts and thresholds take the strictest value: the lowest `maxClass`,
  the shortest approval timeout, spend gated if any policy's threshold is exceeded,
  spend prohibited if any policy prohibits it.
- Shell block lists union; the reference's block list is always included. `blockAction`
  escalates only if every policy that sets it says `escalate`. Shell allow lists narrow
  the tool's (its own or the reference's default): when any policy sets `shell.allow`,
  a command must also match an entry of some policy's list (the policies' lists union,
  as tool allow lists do). A command on no allow list is escalated to approval unless
  some policy says `shell.unlisted: deny` (deny wins).
- Reviewer groups union.
- An invalid policy (bad version range, JSON pointer, regex, ...) fails closed: it
  denies every call until fixed, and `check_policy` says exactly what is wrong.

The decision id is a UUIDv5 over the request hash and the policies (names and content
digests), so a resumed pipeline that re-evaluates the same policies records the same id,
and a changed policy yields a visibly different decision.
"""

from __future__ import annotations

import math
import re
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from tooladapter.enums import (
    BlockAction,
    DataFlowAction,
    DataFlowScope,
    SideEffectClass,
    UnlistedAction,
)
from tooladapter.model import ArgumentCondition, SpendPolicy, ToolPolicySpec, ToolVersionRule
from tooladapter.pipeline.hashing import CanonicalizationError, canonical_json, digest
from tooladapter.pipeline.linear_regex import ENGINE, UnsafePattern, compile_linear
from tooladapter.pipeline.shell.allow import DEFAULT_ALLOW_LIST
from tooladapter.pipeline.shell.block import DEFAULT_BLOCK_LIST
from tooladapter.pipeline.validation.descriptor import check_shell_patterns

DEFAULT_APPROVAL_TIMEOUT_SECONDS = 3600

#: UUIDv5 namespace of policy decision ids.
DECISION_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_URL, "https://tooladapter.dev/policy-decision")


# --------------------------------------------------------------------------- JSON pointer


class JsonPointerError(ValueError):
    """Not an RFC 6901 JSON pointer."""


class _Missing:
    def __repr__(self) -> str:
        return "<missing>"


#: Returned by `resolve_pointer` when the pointer does not resolve.
MISSING: Any = _Missing()

_ARRAY_INDEX = re.compile(r"^(0|[1-9][0-9]*)$")


def parse_pointer(pointer: str) -> list[str]:
    """The reference tokens of an RFC 6901 pointer (`/a~1b/0` -> `['a/b', '0']`)."""
    if pointer == "":
        return []
    if not pointer.startswith("/"):
        raise JsonPointerError(
            f"JSON pointer {pointer!r} must be empty or start with '/' (e.g. /target/env)"
        )
    if re.search(r"~(?![01])", pointer):
        raise JsonPointerError(
            f"JSON pointer {pointer!r} has a '~' not followed by 0 or 1 "
            "(write ~0 for '~' and ~1 for '/')"
        )
    return [part.replace("~1", "/").replace("~0", "~") for part in pointer[1:].split("/")]


def resolve_pointer(document: Any, pointer: str) -> Any:
    """The value at `pointer` in `document`, or `MISSING`."""
    node = document
    for part in parse_pointer(pointer):
        if isinstance(node, dict):
            if part not in node:
                return MISSING
            node = node[part]
        elif isinstance(node, list):
            if not _ARRAY_INDEX.match(part) or int(part) >= len(node):
                return MISSING
            node = node[int(part)]
        else:
            return MISSING
    return node


# --------------------------------------------------------------------------- versions


class VersionRangeError(ValueError):
    """A version range that `packaging` cannot parse."""


def parse_version_range(text: str) -> SpecifierSet | None:
    """A version range: `''`/`'*'` -> None (any); PEP 440 specifiers; a bare version -> `==`."""
    stripped = text.strip()
    if stripped in ("", "*"):
        return None
    try:
        return SpecifierSet(stripped)
    except InvalidSpecifier:
        pass
    try:
        Version(stripped)
        return SpecifierSet("==" + stripped)
    except (InvalidVersion, InvalidSpecifier):
        raise VersionRangeError(
            f"version range {text!r} is not valid: use comma-separated specifiers such as "
            "'>=1.0,<2', '~=1.4', '!=1.3.*', or an exact version"
        ) from None


def version_in_range(version: str, versions: str) -> bool | None:
    """Whether `version` is in the range (pre-releases included); None if `version` is not
    a valid version or the range is invalid (callers fail closed)."""
    try:
        specifier = parse_version_range(versions)
    except VersionRangeError:
        return None
    if specifier is None:
        return True
    try:
        parsed = Version(version)
    except InvalidVersion:
        return None
    return specifier.contains(parsed, prereleases=True)


def _rule_matches(rule: ToolVersionRule, tool_id: str, tool_version: str) -> bool | None:
    if not fnmatchcase(tool_id, rule.id):
        return False
    return version_in_range(tool_version, rule.versions)


def _describe_rule(rule: ToolVersionRule) -> str:
    versions = f" versions {rule.versions}" if rule.versions.strip() not in ("", "*") else ""
    return f"'{rule.id}'{versions}"


# --------------------------------------------------------------------------- checks


def check_policy(spec: ToolPolicySpec) -> list[str]:
    """Everything that makes a policy invalid; empty when it is fine.

    An invalid policy denies every call (fail closed), so these messages are what the
    author needs to fix it: the field, the value and the expected form.
    """
    problems: list[str] = []
    lists: list[tuple[str, Sequence[ToolVersionRule]]] = [("tools.deny", spec.tools.deny)]
    if spec.tools.allow is not None:
        lists.append(("tools.allow", spec.tools.allow))
    for where, rules in lists:
        for index, rule in enumerate(rules):
            if not rule.id.strip():
                problems.append(f"{where}[{index}].id: a tool id (or '*') is required")
            try:
                parse_version_range(rule.versions)
            except VersionRangeError as err:
                problems.append(f"{where}[{index}].versions: {err}")
    problems.extend(check_shell_patterns(spec.shell.allow or [], where="shell.allow"))
    problems.extend(check_shell_patterns(spec.shell.block, where="shell.block"))
    for index, condition in enumerate(spec.conditions):
        problems.extend(f"conditions[{index}]{problem}" for problem in _check_condition(condition))
    if spec.spend is not None:
        argument = spec.spend.argument
        if not argument.strip():
            problems.append("spend.argument: name the argument that holds the amount")
        elif argument.startswith("/"):
            try:
                parse_pointer(argument)
            except JsonPointerError as err:
                problems.append(f"spend.argument: {err}")
    if spec.approval is not None:
        for field, groups in (
            ("reviewerGroups", spec.approval.reviewer_groups),
            ("productionReviewerGroups", spec.approval.production_reviewer_groups),
        ):
            if any(not group.strip() for group in groups):
                problems.append(f"approval.{field}: group names must not be empty")
    return problems


def _check_condition(condition: ArgumentCondition) -> Iterable[str]:
    if not condition.tool.strip():
        yield ".tool: a tool id (or '*') is required"
    try:
        parse_pointer(condition.path)
    except JsonPointerError as err:
        yield f".path: {err}"
    value = condition.value
    operator = condition.operator
    if operator == "in" and not isinstance(value, list):
        yield f".value: operator 'in' needs a list of values, got {type(value).__name__}"
    elif operator == "matches":
        if not isinstance(value, str):
            yield f".value: operator 'matches' needs a regular expression string, got {value!r}"
        else:
            try:
                compile_linear(value)  # RE2: it runs on agent arguments, in linear time
            except UnsafePattern as err:
                yield (
                    f".value: regular expression {value!r} does not compile on the linear "
                    f"regex engine ({ENGINE}): {err}"
                )
    elif operator in ("greaterThan", "lessThan") and (
        isinstance(value, bool) or not isinstance(value, int | float)
    ):
        yield f".value: operator {operator!r} needs a number, got {value!r}"
    elif operator == "exists" and value is not None and not isinstance(value, bool):
        yield f".value: operator 'exists' takes true, false or no value, got {value!r}"


# --------------------------------------------------------------------------- decision


@dataclass(frozen=True)
class PolicyDecision:
    """The tenant-policy decision for one call, recorded with its id and reasons.

    `requires_approval` comes from `requireApproval` argument conditions;
    `spend_requires_approval` says whether a *spend-class* call with these arguments is
    gated (above some threshold, amount unreadable, or no threshold configured). Whether
    the class needs approval at all is `approval.needs_approval`'s job.
    """

    decision_id: str
    allowed: bool
    reasons: tuple[str, ...]
    denials: tuple[str, ...]
    requires_approval: bool
    approval_reasons: tuple[str, ...]
    spend_prohibited: bool
    spend_prohibited_by: tuple[str, ...]
    spend_requires_approval: bool
    spend_amount: float | None
    spend_threshold: float | None
    approval_timeout_seconds: int
    reviewer_groups: tuple[str, ...]
    production_reviewer_groups: tuple[str, ...]
    #: The union of the policies' `shell.allow` lists; None when no policy sets one.
    shell_allow: tuple[str, ...] | None
    shell_block: tuple[str, ...]
    block_action: BlockAction
    unlisted_action: UnlistedAction
    max_class: SideEffectClass | None
    max_class_set_by: str | None
    policies: tuple[str, ...]
    invalid_policies: tuple[str, ...]
    #: Descriptors' rateLimits count per caller too (any policy asking for it).
    rate_limit_per_caller: bool = False
    #: (pattern, policy) for every `shell.block` entry a policy added: denials name it.
    shell_block_sources: tuple[tuple[str, str], ...] = ()
    #: Policies that set `shell.blockAction: deny` / `shell.unlisted: deny` explicitly.
    block_action_deny_by: tuple[str, ...] = ()
    unlisted_deny_by: tuple[str, ...] = ()
    #: The data-flow rule (`pipeline.dataflow`): `caller` if any policy says so; deny wins
    #: over approve over allow (a policy that sets nothing says approve).
    dataflow_scope: DataFlowScope = DataFlowScope.RUN
    dataflow_action: DataFlowAction = DataFlowAction.APPROVE
    #: The operator's default shell lists this decision was made with (settings
    #: `TOOLADAPTER_SHELL_ALLOW_LIST`, `TOOLADAPTER_SHELL_BLOCK_LIST`): the allow list a
    #: descriptor without `shell.allow` gets, and the block list `shell_block` starts from.
    default_shell_allow: tuple[str, ...] = DEFAULT_ALLOW_LIST
    default_shell_block: tuple[str, ...] = DEFAULT_BLOCK_LIST

    def reviewer_groups_for(self, effective: SideEffectClass) -> tuple[str, ...]:
        """Groups whose members may approve a call of this class (empty: any reviewer).

        Production calls need `productionReviewerGroups` when any policy sets them.
        """
        if effective is SideEffectClass.PRODUCTION and self.production_reviewer_groups:
            return self.production_reviewer_groups
        return self.reviewer_groups


def _dedupe(items: Iterable[str]) -> tuple[str, ...]:
    seen: dict[str, None] = {}
    for item in items:
        seen.setdefault(item, None)
    return tuple(seen)


def _dedupe_patterns(items: Iterable[str]) -> tuple[str, ...]:
    seen: dict[str, str] = {}
    for item in items:
        seen.setdefault(" ".join(item.lower().split()), item)
    return tuple(seen.values())


def decision_id_for(policies: Sequence[tuple[str, ToolPolicySpec]], *, request_hash: str) -> str:
    """UUIDv5 over the request hash and the (name, content digest) of every policy."""
    material = {
        "requestHash": request_hash,
        "policies": sorted([name, digest(spec.wire())] for name, spec in policies),
    }
    return str(uuid.uuid5(DECISION_NAMESPACE, canonical_json(material).decode("utf-8")))


def evaluate_policies(
    policies: Sequence[tuple[str, ToolPolicySpec]],
    *,
    namespace: str,
    tool_id: str,
    tool_version: str,
    arguments: Mapping[str, Any],
    request_hash: str,
    default_approval_timeout_seconds: int = DEFAULT_APPROVAL_TIMEOUT_SECONDS,
    default_shell_allow: Sequence[str] = DEFAULT_ALLOW_LIST,
    default_shell_block: Sequence[str] = DEFAULT_BLOCK_LIST,
) -> PolicyDecision:
    """Evaluate the namespace's policies (`(name, spec)` pairs) for one call.

    `default_approval_timeout_seconds` applies when no policy sets an approval timeout;
    `default_shell_allow` and `default_shell_block` are the operator's shell lists in force.

    Names appear verbatim in reasons; pass `namespace/name`.
    """
    ordered = sorted(policies, key=lambda item: item[0])
    tool = f"{tool_id}@{tool_version}"
    reasons: list[str] = []
    denials: list[str] = []
    approval_reasons: list[str] = []
    invalid: list[str] = []
    valid: list[tuple[str, ToolPolicySpec]] = []

    def deny(text: str) -> None:
        denials.append(text)
        reasons.append(text)

    for name, spec in ordered:
        problems = check_policy(spec)
        if problems:
            invalid.append(name)
            more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
            deny(
                f"ToolPolicy {name} is invalid and denies every call until it is fixed: "
                f"{problems[0]}{more}"
            )
        else:
            valid.append((name, spec))

    # deny lists
    for name, spec in valid:
        for rule in spec.tools.deny:
            matched = _rule_matches(rule, tool_id, tool_version)
            if matched is None:
                deny(
                    f"ToolPolicy {name}: tool {tool} cannot be compared with deny entry "
                    f"{_describe_rule(rule)} (version {tool_version!r} is not a valid "
                    "version): denied to be safe"
                )
            elif matched:
                why = f" (reason: {rule.reason})" if rule.reason else ""
                deny(f"ToolPolicy {name}: tool {tool} is on the deny list{why}")

    # allow lists (additive)
    with_allow = [(name, spec) for name, spec in valid if spec.tools.allow is not None]
    if with_allow:
        allowed_by: str | None = None
        for name, spec in with_allow:
            for rule in spec.tools.allow or ():
                if _rule_matches(rule, tool_id, tool_version):
                    allowed_by = (
                        f"ToolPolicy {name}: tool {tool} matches allow entry {_describe_rule(rule)}"
                    )
                    break
            if allowed_by:
                break
        if allowed_by:
            reasons.append(allowed_by)
        else:
            listed = "; ".join(
                f"{name}: {', '.join(map(_describe_rule, spec.tools.allow or ())) or 'nothing'}"
                for name, spec in with_allow
            )
            deny(f"ToolPolicy allow lists do not include tool {tool} (allowed by {listed})")

    # argument conditions
    requires_approval = False
    for name, spec in valid:
        for index, condition in enumerate(spec.conditions):
            if not fnmatchcase(tool_id, condition.tool):
                continue
            holds, detail = _condition_holds(condition, arguments)
            if not holds:
                continue
            why = f" (reason: {condition.reason})" if condition.reason else ""
            text = (
                f"ToolPolicy {name}: argument condition {index} "
                f"({condition.path} {condition.operator} {_show(condition.value)}) holds"
                f"{detail}{why}"
            )
            if condition.effect == "deny":
                deny(text + ": denied")
            else:
                requires_approval = True
                approval_reasons.append(text + ": approval required")
                reasons.append(text + ": approval required")

    # spend
    spend_policies = [(name, spec.spend) for name, spec in valid if spec.spend is not None]
    prohibited_by = tuple(name for name, spend in spend_policies if spend.prohibited)
    spend_gate, spend_amount, spend_notes = _spend_gate(spend_policies, arguments)
    reasons.extend(spend_notes)
    threshold = min((spend.threshold for _, spend in spend_policies), default=None)

    # approval settings
    timeouts = [
        spec.approval.timeout_seconds
        for _, spec in valid
        if spec.approval is not None and "timeout_seconds" in spec.approval.model_fields_set
    ]
    reviewer_groups = sorted(
        {g for _, spec in valid if spec.approval for g in spec.approval.reviewer_groups}
    )
    production_groups = sorted(
        {g for _, spec in valid if spec.approval for g in spec.approval.production_reviewer_groups}
    )

    # shell
    allow_lists = [spec.shell.allow for _, spec in valid if spec.shell.allow is not None]
    shell_allow = _dedupe(p for allow in allow_lists for p in allow) if allow_lists else None
    shell_block = _dedupe_patterns(
        [*default_shell_block, *(p for _, spec in valid for p in spec.shell.block)]
    )
    actions = [
        spec.shell.block_action
        for _, spec in valid
        if "block_action" in spec.shell.model_fields_set
    ]
    block_action = (
        BlockAction.ESCALATE
        if actions and all(a is BlockAction.ESCALATE for a in actions)
        else BlockAction.DENY
    )
    unlisted_action = (
        UnlistedAction.DENY
        if any(spec.shell.unlisted is UnlistedAction.DENY for _, spec in valid)
        else UnlistedAction.ESCALATE
    )

    # ceiling
    max_class: SideEffectClass | None = None
    max_class_set_by: str | None = None
    for name, spec in valid:
        if spec.max_class is not None and (
            max_class is None or spec.max_class.rank < max_class.rank
        ):
            max_class, max_class_set_by = spec.max_class, name

    if not ordered:
        reasons.append(f"no ToolPolicy in namespace {namespace}: only the default rules apply")

    return PolicyDecision(
        decision_id=decision_id_for(ordered, request_hash=request_hash),
        allowed=not denials,
        reasons=tuple(reasons),
        denials=tuple(denials),
        requires_approval=requires_approval,
        approval_reasons=tuple(approval_reasons),
        spend_prohibited=bool(prohibited_by),
        spend_prohibited_by=prohibited_by,
        spend_requires_approval=spend_gate,
        spend_amount=spend_amount,
        spend_threshold=threshold,
        approval_timeout_seconds=min(timeouts, default=default_approval_timeout_seconds),
        reviewer_groups=tuple(reviewer_groups),
        production_reviewer_groups=tuple(production_groups),
        shell_allow=shell_allow,
        shell_block=shell_block,
        block_action=block_action,
        unlisted_action=unlisted_action,
        max_class=max_class,
        max_class_set_by=max_class_set_by,
        policies=tuple(name for name, _ in ordered),
        invalid_policies=tuple(invalid),
        rate_limit_per_caller=any(spec.rate_limits.per_caller for _, spec in valid),
        shell_block_sources=tuple((p, name) for name, spec in valid for p in spec.shell.block),
        block_action_deny_by=tuple(
            name
            for name, spec in valid
            if "block_action" in spec.shell.model_fields_set
            and spec.shell.block_action is BlockAction.DENY
        ),
        unlisted_deny_by=tuple(
            name for name, spec in valid if spec.shell.unlisted is UnlistedAction.DENY
        ),
        dataflow_scope=(
            DataFlowScope.CALLER
            if any(spec.data_flow.scope is DataFlowScope.CALLER for _, spec in valid)
            else DataFlowScope.RUN
        ),
        dataflow_action=_dataflow_action(
            [spec.data_flow.on_private_and_untrusted for _, spec in valid]
        ),
        default_shell_allow=tuple(default_shell_allow),
        default_shell_block=tuple(default_shell_block),
    )


def _dataflow_action(actions: list[DataFlowAction]) -> DataFlowAction:
    """Deny wins over approve over allow; no policy: approve (the rule is on by default)."""
    for action in (DataFlowAction.DENY, DataFlowAction.APPROVE, DataFlowAction.ALLOW):
        if action in actions:
            return action
    return DataFlowAction.APPROVE


def _pattern_key(pattern: str) -> str:
    return " ".join(pattern.lower().split())


def block_pattern_source(
    pattern: str, *, descriptor_block: Sequence[str], decision: PolicyDecision
) -> str:
    """Where a block-list pattern comes from: the default list, the tool, which policies."""
    key = _pattern_key(pattern)
    sources = [
        f"ToolPolicy {name}"
        for entry, name in decision.shell_block_sources
        if _pattern_key(entry) == key
    ]
    if any(_pattern_key(entry) == key for entry in descriptor_block):
        sources.insert(0, "the tool's shell.block")
    if any(_pattern_key(entry) == key for entry in decision.default_shell_block):
        sources.insert(0, "the default block list")
    return ", ".join(dict.fromkeys(sources)) or "the block list"


def shell_action_source(decision: PolicyDecision, *, blocked: bool) -> str:
    """Which policies made a blocked (or unlisted) command a denial."""
    names = decision.block_action_deny_by if blocked else decision.unlisted_deny_by
    if names:
        return "set by " + ", ".join(f"ToolPolicy {name}" for name in names)
    if blocked:
        return "the default: no ToolPolicy sets blockAction: escalate"
    return "the default"


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:59] + "…"


def _same(a: Any, b: Any) -> bool:
    return _one_of(a, [b])


def _one_of(actual: Any, items: Sequence[Any]) -> bool:
    """Whether `actual` equals any of `items` as JSON. The agent's value is canonicalised
    once, not once per item (up to the argument bound each time, on the event loop)."""
    try:
        key = canonical_json(actual)
    except CanonicalizationError:
        return any(bool(actual == item) for item in items)
    for item in items:
        try:
            if canonical_json(item) == key:
                return True
        except CanonicalizationError:
            if bool(actual == item):
                return True
    return False


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        number = float(value)
    elif isinstance(value, str):
        try:
            number = float(value.strip())
        except ValueError:
            return None
    else:
        return None
    return number if math.isfinite(number) else None


def _condition_holds(condition: ArgumentCondition, arguments: Any) -> tuple[bool, str]:
    """(holds, detail). Values that cannot be compared make the condition hold (fail closed)."""
    actual = resolve_pointer(arguments, condition.path)
    operator = condition.operator
    expected = condition.value
    if operator == "exists":
        present = actual is not MISSING
        return present == (expected is not False), ""
    if actual is MISSING:
        return operator == "notEquals", f" (argument {condition.path} is absent)"
    if operator == "equals":
        return _same(actual, expected), ""
    if operator == "notEquals":
        return not _same(actual, expected), ""
    if operator == "in":
        return _one_of(actual, list(expected or ())), ""
    if operator == "matches":
        text = actual if isinstance(actual, str) else canonical_json(actual).decode("utf-8")
        return compile_linear(str(expected)).search(text) is not None, ""
    number = _number(actual)
    if number is None:
        return True, f" (argument {condition.path} is not a number, so it counts as holding)"
    if operator == "greaterThan":
        return number > float(expected), ""
    return number < float(expected), ""


def spend_amount(arguments: Mapping[str, Any], argument: str) -> float | None:
    """The amount a spend call moves: the named argument (or JSON pointer), as a number."""
    value = (
        resolve_pointer(arguments, argument)
        if argument.startswith("/")
        else arguments.get(argument, MISSING)
    )
    return None if value is MISSING else _number(value)


def _spend_gate(
    spend_policies: Sequence[tuple[str, SpendPolicy]], arguments: Mapping[str, Any]
) -> tuple[bool, float | None, list[str]]:
    if not spend_policies:
        return True, None, []
    gated = False
    first_amount: float | None = None
    notes: list[str] = []
    for name, spend in spend_policies:
        amount = spend_amount(arguments, spend.argument)
        if amount is None:
            gated = True
            notes.append(
                f"ToolPolicy {name}: spend amount argument {spend.argument!r} is missing or "
                "not a number: a spend call counts as above the threshold"
            )
            continue
        if first_amount is None:
            first_amount = amount
        if abs(amount) > spend.threshold:
            gated = True
            notes.append(
                f"ToolPolicy {name}: spend amount {amount:g} is above the threshold "
                f"{spend.threshold:g}"
            )
    return gated, first_amount, notes


def spend_gated(
    policies: Sequence[tuple[str, ToolPolicySpec]], arguments: Mapping[str, Any]
) -> bool:
    """Whether a spend-class call with these arguments needs approval.

    True when any policy's threshold is exceeded (by absolute amount), when the amount
    is missing or not a number, and when no policy configures a threshold at all.
    """
    spend_policies = [(name, spec.spend) for name, spec in policies if spec.spend is not None]
    return _spend_gate(spend_policies, arguments)[0]


def check_ceiling(decision: PolicyDecision, effective: SideEffectClass) -> str | None:
    """The denial reason when `effective` is beyond what the policies allow, else None.

    Covers the class ceiling (`maxClass`, the lowest across policies) and a spend
    prohibition (`spend.prohibited`) for spend-class calls.
    """
    if decision.max_class is not None and effective.rank > decision.max_class.rank:
        return (
            f"ToolPolicy {decision.max_class_set_by}: effective class {effective.value} "
            f"exceeds the ceiling {decision.max_class.value}"
        )
    if effective is SideEffectClass.SPEND and decision.spend_prohibited:
        return f"ToolPolicy {', '.join(decision.spend_prohibited_by)}: spend calls are prohibited"
    return None
