"""The pipeline stages as plain functions over plain data.

Nothing in this package talks to Kubernetes, the network or the file system: every rule
of the pipeline (validation, policy, classification, approval binding, shell checks,
sanitization, receipts, the state machine) is a pure function, testable without a
cluster. The kopf handlers fetch the inputs, call these, and write the results.
"""

from .approval import BindCode, BindResult, approval_timed_out, bind_approval, needs_approval
from .classification import Classification, classify, mcp_hint_class
from .hashing import canonical_json, digest, request_hash, sha256_ref
from .policy import (
    PolicyDecision,
    check_ceiling,
    check_policy,
    evaluate_policies,
    resolve_pointer,
    spend_gated,
)
from .receipt import RECEIPT_SCHEMA, build_receipt
from .sanitize import Sanitized, provenance_envelope, redact_text, sanitize
from .shell import (
    DEFAULT_ALLOW_LIST,
    DEFAULT_BLOCK_LIST,
    ShellRule,
    ShellVerdict,
    check_command,
)
from .states import IllegalTransition, allowed_targets, is_terminal, transition
from .validation import (
    HttpTemplateError,
    RenderedHttpRequest,
    SchemaProblem,
    check_bounds,
    check_descriptor,
    check_schema,
    parse_egress_entry,
    render_http_request,
    validate_arguments,
)

__all__ = [
    "DEFAULT_ALLOW_LIST",
    "DEFAULT_BLOCK_LIST",
    "RECEIPT_SCHEMA",
    "BindCode",
    "BindResult",
    "Classification",
    "HttpTemplateError",
    "IllegalTransition",
    "PolicyDecision",
    "RenderedHttpRequest",
    "Sanitized",
    "SchemaProblem",
    "ShellRule",
    "ShellVerdict",
    "allowed_targets",
    "approval_timed_out",
    "bind_approval",
    "build_receipt",
    "canonical_json",
    "check_bounds",
    "check_ceiling",
    "check_command",
    "check_descriptor",
    "check_policy",
    "check_schema",
    "classify",
    "digest",
    "evaluate_policies",
    "is_terminal",
    "mcp_hint_class",
    "needs_approval",
    "parse_egress_entry",
    "provenance_envelope",
    "redact_text",
    "render_http_request",
    "request_hash",
    "resolve_pointer",
    "sanitize",
    "sha256_ref",
    "spend_gated",
    "transition",
    "validate_arguments",
]
