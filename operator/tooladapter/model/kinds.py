"""The five resources with their CRD naming: what `crdgen` generates a CRD for, in order."""

from __future__ import annotations

from tooladapter.model.approval import ToolApproval, ToolApprovalSpec, ToolApprovalStatus
from tooladapter.model.base import Model, Resource
from tooladapter.model.descriptor import ToolDescriptor, ToolDescriptorSpec, ToolDescriptorStatus
from tooladapter.model.invocation import ToolInvocation, ToolInvocationSpec, ToolInvocationStatus
from tooladapter.model.mcp_server import McpServer, McpServerSpec, McpServerStatus
from tooladapter.model.policy import ToolPolicy, ToolPolicySpec, ToolPolicyStatus

#: Every resource with its CRD naming: (model, spec model, status model, plural, short names).
RESOURCES: tuple[tuple[type[Resource], type[Model], type[Model], str, tuple[str, ...]], ...] = (
    (ToolDescriptor, ToolDescriptorSpec, ToolDescriptorStatus, "tooldescriptors", ("td", "tool")),
    (McpServer, McpServerSpec, McpServerStatus, "mcpservers", ("mcps",)),
    (ToolInvocation, ToolInvocationSpec, ToolInvocationStatus, "toolinvocations", ("ti", "tinv")),
    (ToolApproval, ToolApprovalSpec, ToolApprovalStatus, "toolapprovals", ("tapr",)),
    (ToolPolicy, ToolPolicySpec, ToolPolicyStatus, "toolpolicies", ("tpol",)),
)
