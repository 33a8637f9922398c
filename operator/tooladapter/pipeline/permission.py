"""The permission stage's questions and answers, as plain data.

The flow asks the API server (SubjectAccessReview) and the dry run asks the same questions
or takes the answers it is given; both refuse with `refusals.permission_denied`, so they
refuse alike.
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


@dataclass(frozen=True)
class Permission:
    """The caller's RBAC answers: `invoke` on the tool, `use` on the effective class."""

    invoke: bool
    use: bool


def questions(tool_id: str, effective: SideEffectClass) -> tuple[Question, Question]:
    """`invoke` on the tool's descriptor and `use` on the call's effective class."""
    return (
        Question("invoke", Resource.DESCRIPTORS, tool_id),
        Question("use", Resource.SIDE_EFFECT_CLASSES, effective.value),
    )
