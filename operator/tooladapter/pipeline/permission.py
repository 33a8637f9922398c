"""The permission stage's questions and its refusal, as plain data.

The flow asks the API server (SubjectAccessReview) and the dry run asks the same questions
or takes the answers it is given; both word a refusal here, so they refuse alike.
"""

from __future__ import annotations

from dataclasses import dataclass

from tooladapter.enums import Resource, SideEffectClass


@dataclass(frozen=True)
class Question:
    """One RBAC question for the caller: `verb` on `resource`/`name` in the namespace."""

    verb: str
    resource: Resource
    name: str

    def __str__(self) -> str:
        return f"{self.verb} {self.resource.value}/{self.name}"


def questions(tool_id: str, effective: SideEffectClass) -> tuple[Question, Question]:
    """`invoke` on the tool's descriptor and `use` on the call's effective class."""
    return (
        Question("invoke", Resource.DESCRIPTORS, tool_id),
        Question("use", Resource.SIDE_EFFECT_CLASSES, effective.value),
    )


def refusal(
    *,
    caller: str,
    groups: list[str],
    namespace: str,
    tool_id: str,
    effective: SideEffectClass,
    may_invoke: bool,
    may_use: bool,
    raised: str = "",
) -> str | None:
    """The denial message for the first question answered no, else None; `raised`
    (`classification.raised_note`) says why the class is higher than the declared one."""
    hint = groups_hint(caller, groups)
    if not may_invoke:
        return (
            f"{caller} may not invoke tooldescriptors/{tool_id} in "
            f"{namespace} (RBAC verb invoke){hint}"
        )
    if not may_use:
        return (
            f"{caller} may not use sideeffectclasses/{effective} in "
            f"{namespace} (RBAC verb use){raised}{hint}"
        )
    return None


def groups_hint(user: str, groups: list[str]) -> str:
    """A person without groups in spec.caller.groups is reviewed by name only: say so."""
    if groups or user.startswith("system:serviceaccount:"):
        return ""
    return (
        "; no spec.caller.groups were given, so grants to groups were not considered "
        "(list your groups there to use them)"
    )
