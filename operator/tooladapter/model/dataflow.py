"""The data-flow blocks: what a descriptor's results are (`ToolDescriptor.spec.dataFlow`),
how a tenant wants the rule applied (`ToolPolicy.spec.dataFlow`), and what a call recorded
(`ToolInvocation.status.dataFlow`).

The rule itself is `pipeline.dataflow`: a call that can send data out, made once its scopes
hold both `private` and `untrusted` results, needs an approval (or is denied).
"""

from __future__ import annotations

from pydantic import Field

from tooladapter.enums import DataFlowAction, DataFlowScope, DataLabel, SinkMode
from tooladapter.model.base import Model


class DescriptorDataFlow(Model):
    """What the tool's results are, and whether it can send data out."""

    labels: list[DataLabel] | None = Field(
        default=None,
        max_length=2,
        description="What the results are: private (tenant-private data) and/or untrusted "
        "(content from outside the tenant's control). Unset: none, except for mcp tools, "
        "which are untrusted unless this is set (an explicit empty list says none).",
    )
    sink: SinkMode | None = Field(
        default=None,
        description="none: the tool cannot send data out, so the data-flow rule never gates "
        "it. Allowed only with sandbox.egress.allow: [] and never for http or mcp tools or "
        "classes external and above.",
    )


class PolicyDataFlow(Model):
    """How the tenant applies the data-flow rule (the strictest of the policies wins)."""

    scope: DataFlowScope = Field(
        default=DataFlowScope.RUN,
        description="run: a call is judged by the labels of its run and attempt (its "
        "caller's window when it names neither); caller: also by every call of its caller "
        "within TOOLADAPTER_DATAFLOW_WINDOW_SECONDS, whatever its runId (for harnesses that "
        "let the model choose runIds).",
    )
    on_private_and_untrusted: DataFlowAction = Field(
        default=DataFlowAction.APPROVE,
        description="A sink call whose scopes hold both private and untrusted: approve (it "
        "waits for an approval), deny (Denied at policy) or allow.",
    )


class LabelSource(Model):
    """One label a scope holds, and the call that brought it."""

    label: DataLabel
    """The label."""
    invocation: str
    """The invocation (name) whose result carried it."""
    tool: str = ""
    """Its tool id."""
    at: str = ""
    """When that call ended (RFC 3339)."""


class DataFlowRecord(Model):
    """What the data-flow rule saw for this call."""

    labels: list[DataLabel] = Field(default_factory=list)
    """The labels this call's result brings into its scopes."""
    sources: list[LabelSource] = Field(default_factory=list)
    """The labels its scopes held when it was judged, with the calls that brought them."""
    sink: bool = False
    """Whether the call can send data out."""
    gated: str | None = None
    """Why the call was gated (approval or denial), when it was."""
    pending: bool | None = None
    """True while the labels this call brought are not yet in its scopes' stores (their
    write failed at its end): the call ended anyway, the operator retries the write and its
    gate counts them meanwhile."""
