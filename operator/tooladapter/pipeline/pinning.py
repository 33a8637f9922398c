"""What a reviewer approved stays what runs: a gated call's shell and egress lists, pinned.

The lists a call is judged and leased with come partly from reloadable settings (the default
shell allow and block lists, the default egress list). When a call starts waiting for its
approval, the lists in force are recorded (`status.approvedLists`); the re-check right
before the call acts computes them again and denies the call when any has widened since:
an allow entry or egress destination added, a block pattern removed, a policy's narrowing
lifted. Narrower lists are not a reason to deny (the call then runs with less than was
approved, and the shell check itself judges the command again).
"""

from __future__ import annotations

from collections.abc import Sequence

from tooladapter.egress.core.rules import effective_allow
from tooladapter.enums import ToolKind
from tooladapter.model import ApprovedLists, ToolDescriptorSpec
from tooladapter.pipeline.hashing import digest
from tooladapter.pipeline.policy import PolicyDecision
from tooladapter.pipeline.shell.allow import allow_list_for


def _pattern_key(pattern: str) -> str:
    # As block patterns match: case and spacing do not matter.
    return " ".join(pattern.lower().split())


def lists_of(
    descriptor: ToolDescriptorSpec,
    decision: PolicyDecision,
    *,
    default_egress_allow: Sequence[str],
    egress_narrowing: Sequence[Sequence[str]] = (),
) -> ApprovedLists:
    """The effective lists of one call: its shell lists (shell tools) and its sandbox's
    egress list, as the lease would get it now."""
    shell = descriptor.kind == ToolKind.SHELL
    allow = (
        list(
            allow_list_for(
                descriptor.shell.allow if descriptor.shell else None, decision.default_shell_allow
            )
        )
        if shell
        else None
    )
    narrowing = list(decision.shell_allow) if shell and decision.shell_allow is not None else None
    block = (
        sorted(
            {
                _pattern_key(p)
                for p in [
                    *(descriptor.shell.block if descriptor.shell else []),
                    *decision.shell_block,
                ]
            }
        )
        if shell
        else None
    )
    sandbox = descriptor.sandbox_spec
    egress = (
        effective_allow(sandbox.egress.allow, default_egress_allow, egress_narrowing)
        if sandbox is not None
        else None
    )
    lists = {
        "shellAllow": allow,
        "shellAllowNarrowing": narrowing,
        "shellBlock": block,
        "egressAllow": egress,
    }
    return ApprovedLists(
        shell_allow=allow,
        shell_allow_narrowing=narrowing,
        shell_block=block,
        egress_allow=egress,
        digest=digest(lists),
    )


def _added(now: Sequence[str] | None, then: Sequence[str] | None) -> list[str]:
    if now is None:
        return []
    before = set(then or [])
    return [entry for entry in now if entry not in before]


def egress_added(now: Sequence[str] | None, then: Sequence[str] | None) -> list[str]:
    """Entries of `now` that no entry of `then` covers (a host under an approved wildcard,
    a subnet of an approved CIDR is no widening)."""
    if now is None:
        return []
    covered = set(effective_allow(list(now), (), [list(then or [])]))
    return [entry for entry in now if entry not in covered]


def widenings(approved: ApprovedLists, now: ApprovedLists) -> list[str]:
    """How `now` is wider than what was approved, one phrase per list (empty: not wider)."""
    found: list[str] = []
    added = _added(now.shell_allow, approved.shell_allow)
    if added:
        found.append(f"shell allow list gained {', '.join(repr(a) for a in added)}")
    if approved.shell_allow_narrowing is not None:
        if now.shell_allow_narrowing is None:
            found.append("the policies no longer narrow the shell allow list")
        else:
            added = _added(now.shell_allow_narrowing, approved.shell_allow_narrowing)
            if added:
                found.append(
                    f"the policies' shell allow lists gained {', '.join(repr(a) for a in added)}"
                )
    removed = _added(approved.shell_block, now.shell_block if now.shell_block is not None else [])
    if approved.shell_block is not None and removed:
        found.append(f"shell block list lost {', '.join(repr(r) for r in removed)}")
    added = egress_added(now.egress_allow, approved.egress_allow)
    if added:
        found.append(f"egress allow list gained {', '.join(added)}")
    return found
