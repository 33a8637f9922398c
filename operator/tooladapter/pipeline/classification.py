"""Side-effect classification: the effective class of one call, and whether it may run.

The rules, from the design and the reference:

- The declared class is a floor: nothing here ever lowers it. Every other input can
  only raise the class (the risk class via `RISK_TO_CLASS`, untrusted MCP annotations,
  the environment, a block-listed shell command).
- A production environment raises writes (`shared-write`, `external`) to `production`.
  An unknown environment class counts as production (`environment_class`).
  `read` and `sandbox` stay: they have no shared effect to protect; `spend` stays: it is
  already gated by its own threshold rules and ranks above production.
- A frozen environment refuses `shared-write` and `production`, judged on the effective
  class (so an `external` call in a frozen production namespace, raised to production,
  is refused too).
- A block-listed shell command is refused when the policy says `deny`, or escalated to
  production (and so to approval) when it says `escalate`. Structural refusals (shell
  operators, substitutions, ...) are never escalated.
- A shell command on no allow list (`ShellVerdict.unlisted`) never runs as its declared
  class alone: by default (`shell.unlisted: escalate`) it is raised to `shared-write` and
  must be approved whatever its class; a policy with `shell.unlisted: deny` refuses it.
  The block list is judged first: a blocked command is never merely unlisted.
- The shell rules come before the environment's, so an unlisted command in a
  production namespace is raised on to production.

Classification is a pure function of its inputs so dry-runs, the pipeline and a resumed
pipeline agree.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tooladapter.enums import (
    RISK_TO_CLASS,
    BlockAction,
    EnvironmentClass,
    RiskClass,
    SideEffectClass,
    UnlistedAction,
)

#: Namespace labels: the environment class, and a freeze.
LABEL_ENVIRONMENT = "tooladapter.dev/environment-class"
LABEL_FROZEN = "tooladapter.dev/frozen"

#: Classes a production environment raises to production.
PRODUCTION_RAISES = frozenset({SideEffectClass.SHARED_WRITE, SideEffectClass.EXTERNAL})
#: Classes a frozen environment refuses (judged on the effective class).
FROZEN_REFUSES = frozenset({SideEffectClass.SHARED_WRITE, SideEffectClass.PRODUCTION})


@dataclass(frozen=True)
class Classification:
    """The effective class and whether the call is refused at this stage.

    `raised_by` names every rule that raised the class, in order. `approval_forced` is
    set when an escalated block-listed or unlisted shell command must be approved even
    though its class (`spend`, ranked above production) would not otherwise require it.
    """

    declared: SideEffectClass
    effective: SideEffectClass
    refused: bool
    reason: str
    raised_by: tuple[str, ...]
    approval_forced: bool = False


def classify(
    *,
    declared: SideEffectClass,
    environment: EnvironmentClass,
    frozen: bool,
    shell_blocked: bool = False,
    block_action: BlockAction = BlockAction.DENY,
    hinted: SideEffectClass | None = None,
    risk: RiskClass | None = None,
    shell_escalate_ok: bool = True,
    shell_unlisted: bool = False,
    unlisted_action: UnlistedAction = UnlistedAction.ESCALATE,
    shell_reason: str = "",
    shell_policy_source: str = "",
) -> Classification:
    """Classify one call; see the module docstring for the rules.

    `shell_blocked` / `shell_escalate_ok` / `shell_unlisted` come from
    `ShellVerdict.blocked` / `.escalate_ok` / `.unlisted`; `block_action` and
    `unlisted_action` from the policy decision; `shell_reason` (`ShellVerdict.reason`)
    is quoted in refusals and raises; `shell_policy_source` names the policies whose
    blockAction or shell.unlisted decided a refusal; `hinted` from `mcp_hint_class`;
    `risk` from the descriptor's `riskClass`.
    """
    why = f" ({shell_reason})" if shell_reason else ""
    source = f" ({shell_policy_source})" if shell_policy_source else ""
    effective = declared
    raised_by: list[str] = []

    def raise_to(target: SideEffectClass, because: str) -> None:
        nonlocal effective
        if target.rank > effective.rank:
            raised_by.append(f"{because} raised {effective.value} to {target.value}")
            effective = target

    if risk is not None:
        raise_to(RISK_TO_CLASS[risk], f"riskClass {risk.value}")
    if hinted is not None:
        raise_to(hinted, "MCP tool annotations")

    refusals: list[str] = []
    approval_forced = False
    if shell_blocked:
        if block_action is BlockAction.ESCALATE and shell_escalate_ok:
            raise_to(
                SideEffectClass.PRODUCTION,
                f"a block-listed shell command (blockAction escalate){why}",
            )
            approval_forced = True
        elif not shell_escalate_ok:
            refusals.append(
                "the shell command is refused outright" + (why or " (see the shell check)")
            )
        else:
            refusals.append(
                "the shell command is on the block list and the policy's blockAction is "
                f"deny{source}{why}"
            )
    elif shell_unlisted:
        if unlisted_action is UnlistedAction.DENY:
            refusals.append(
                "the shell command is not on the allow list and the policy's shell.unlisted "
                f"is deny{source}{why}"
            )
        else:
            raise_to(SideEffectClass.SHARED_WRITE, f"a shell command not on the allow list{why}")
            approval_forced = True
    if environment is EnvironmentClass.PRODUCTION and effective in PRODUCTION_RAISES:
        raise_to(SideEffectClass.PRODUCTION, "the production environment")
    if frozen and effective in FROZEN_REFUSES:
        refusals.append(
            f"the environment is frozen (namespace label tooladapter.dev/frozen=true): "
            f"{effective.value} calls are refused until it is unfrozen"
        )

    if refusals:
        reason = "; ".join(refusals) + raised_note(tuple(raised_by))
    elif raised_by:
        reason = f"declared {declared.value}; " + "; ".join(raised_by)
    else:
        reason = f"declared {declared.value}; nothing raised it"
    return Classification(
        declared=declared,
        effective=effective,
        refused=bool(refusals),
        reason=reason,
        raised_by=tuple(raised_by),
        approval_forced=approval_forced,
    )


def raised_note(raised_by: tuple[str, ...]) -> str:
    """What to add to a denial judged on the effective class, so one message says both why
    the class rose and why that class is refused (empty when nothing raised it)."""
    if not raised_by:
        return ""
    return f" (the call's class was raised: {'; '.join(raised_by)})"


def namespace_environment(labels: Mapping[str, str]) -> tuple[EnvironmentClass, bool]:
    """A namespace's environment class (an unknown one counts as production) and whether it
    is frozen, from its labels."""
    environment, _known = environment_class(labels.get(LABEL_ENVIRONMENT))
    return environment, labels.get(LABEL_FROZEN, "").lower() == "true"


def environment_class(label: str | None) -> tuple[EnvironmentClass, bool]:
    """The environment class a namespace's `tooladapter.dev/environment-class` label names,
    and whether the value is a known one.

    No label (or an empty one) is development. Any other value that is not exactly a class
    (`Production`, `prod`, a typo) fails closed: production, reported as unknown so the
    operator can warn about it; a mistyped label never lowers the protection."""
    if not label:
        return EnvironmentClass.DEVELOPMENT, True
    try:
        return EnvironmentClass(label), True
    except ValueError:
        return EnvironmentClass.PRODUCTION, False


def mcp_hint_class(annotations: Mapping[str, Any] | None) -> SideEffectClass | None:
    """The class MCP tool annotations suggest; untrusted, so callers use it only to raise.

    Only explicit booleans count (the MCP defaults are not applied): `readOnlyHint: true`
    -> read, `readOnlyHint: false` -> shared-write, `openWorldHint: true` -> external,
    `destructiveHint: true` -> production. Contradictory hints give the highest.
    """
    if not annotations:
        return None
    hinted: list[SideEffectClass] = []
    read_only = annotations.get("readOnlyHint")
    if read_only is True:
        hinted.append(SideEffectClass.READ)
    elif read_only is False:
        hinted.append(SideEffectClass.SHARED_WRITE)
    if annotations.get("openWorldHint") is True:
        hinted.append(SideEffectClass.EXTERNAL)
    if annotations.get("destructiveHint") is True:
        hinted.append(SideEffectClass.PRODUCTION)
    return SideEffectClass.highest(*hinted) if hinted else None
