"""The OpenAPI 3.1 document of the gateway, written by hand from small parts.

Each route module declares its own `PATHS` with the helpers here; `document()` joins them
with the shared component schemas. Schemas are exact where the gateway builds the JSON
itself and open (`additionalProperties` allowed) where it passes an object's spec or
status through, which other versions of the CRDs may extend.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

from pydantic import BaseModel

from tooladapter.gateway.params import NAME_PATTERN, NAMESPACE_PATTERN, RUN_ID_MAX, SHA256_PATTERN
from tooladapter.gateway.views.problems import PROBLEM_MEDIA_TYPE
from tooladapter.model import VERSION_MAX, VERSION_PATTERN, InvocationPreview

_ERROR_TEXT: Final = {
    400: "Bad request",
    401: "No valid bearer token",
    403: "The caller may not do this",
    404: "Not found (or not visible to the caller)",
    409: "Conflicts with the object's current state",
    413: "Request body too large",
    422: "Invalid request",
    429: "Too many requests: the caller's or the namespace's cap (Retry-After says when)",
    503: "The Kubernetes API server is unavailable",
}

#: The errors every authenticated operation may answer.
COMMON_ERRORS: Final = (401, 403, 404, 429, 503)


def ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def problems(*codes: int) -> dict[str, Any]:
    return {
        str(code): {
            "description": _ERROR_TEXT[code],
            "content": {PROBLEM_MEDIA_TYPE: {"schema": ref("Problem")}},
        }
        for code in sorted({*COMMON_ERRORS, *codes})
    }


def ok(schema: Mapping[str, Any], description: str, code: int = 200) -> dict[str, Any]:
    return {
        str(code): {"description": description, "content": {"application/json": {"schema": schema}}}
    }


def path_param(name: str, schema: Mapping[str, Any], description: str) -> dict[str, Any]:
    return {
        "name": name,
        "in": "path",
        "required": True,
        "description": description,
        "schema": dict(schema),
    }


NAMESPACE: Final = path_param(
    "namespace",
    {"type": "string", "pattern": NAMESPACE_PATTERN, "maxLength": 63},
    "The tenant namespace.",
)
OBJECT_NAME: Final = path_param(
    "name",
    {"type": "string", "pattern": NAME_PATTERN, "maxLength": 253},
    "The ToolInvocation's name.",
)
OBJECT_NAME_OR_UID: Final = path_param(
    "name",
    {"type": "string", "pattern": NAME_PATTERN, "maxLength": 253},
    "The ToolInvocation's name, or its uid (metadata.uid): a name is tried first, but "
    "the invocation with that uid wins over one merely named so.",
)
TOOL_ID: Final = path_param(
    "toolId",
    {"type": "string", "pattern": r"^[a-z0-9]([-a-z0-9._]{0,61}[a-z0-9])?$", "maxLength": 63},
    "The tool id (the descriptor's spec.toolId).",
)
RUN_ID: Final = path_param(
    "runId", {"type": "string", "minLength": 1, "maxLength": RUN_ID_MAX}, "spec.runId of calls."
)
SHA256: Final = path_param(
    "sha256", {"type": "string", "pattern": SHA256_PATTERN}, "The receipt's sha256 (hex)."
)
SECURITY: Final[list[dict[str, list[str]]]] = [{"bearer": []}]

_NULLABLE_STRING: Final = {"type": ["string", "null"]}
_ANNOTATIONS: Final = {
    "type": "object",
    "required": ["readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint"],
    "properties": {
        "readOnlyHint": {"type": "boolean"},
        "destructiveHint": {"type": "boolean"},
        "idempotentHint": {"type": "boolean"},
        "openWorldHint": {"type": "boolean"},
    },
    "additionalProperties": False,
}
_TOOL_PROPERTIES: Final = {
    "toolId": {"type": "string"},
    "version": {"type": "string"},
    "versions": {"type": "array", "items": {"type": "string"}},
    "descriptor": {"type": "string"},
    "kind": {"type": "string", "enum": ["native", "mcp", "shell", "container", "http"]},
    "description": {"type": "string"},
    "sideEffectClass": {"type": "string"},
    "declaredClass": {"type": "string"},
    "riskClass": _NULLABLE_STRING,
    "server": _NULLABLE_STRING,
    "active": {"type": "boolean"},
    "healthy": {"type": "boolean"},
    "annotations": _ANNOTATIONS,
}
_TOOL_REQUIRED: Final = list(_TOOL_PROPERTIES)

SCHEMAS: Final[dict[str, Any]] = {
    "Problem": {
        "type": "object",
        "description": "RFC 9457 problem details.",
        "required": ["type", "title", "status", "detail"],
        "properties": {
            "type": {"type": "string", "format": "uri"},
            "title": {"type": "string"},
            "status": {"type": "integer", "minimum": 400, "maximum": 599},
            "detail": {"type": "string"},
        },
    },
    "Health": {
        "type": "object",
        "required": ["status"],
        "properties": {"status": {"const": "ok"}},
        "additionalProperties": False,
    },
    "Tool": {
        "type": "object",
        "required": _TOOL_REQUIRED,
        "properties": _TOOL_PROPERTIES,
        "additionalProperties": False,
    },
    "ToolList": {
        "type": "object",
        "required": ["namespace", "items"],
        "properties": {
            "namespace": {"type": "string"},
            "items": {"type": "array", "items": ref("Tool")},
        },
        "additionalProperties": False,
    },
    "ToolDetail": {
        "type": "object",
        "required": [*_TOOL_REQUIRED, "inputSchema"],
        "properties": {
            **_TOOL_PROPERTIES,
            "inputSchema": {"type": "object"},
            "outputSchema": {"type": ["object", "null"]},
            "credentials": {
                "type": "array",
                "description": "What a call carries: name, source kind, and hosts or file.",
                "items": {
                    "type": "object",
                    "required": ["name", "source"],
                    "properties": {
                        "name": {"type": "string"},
                        "source": {
                            "enum": [
                                "secretKeyRef",
                                "serviceAccountToken",
                                "oauth2ClientCredentials",
                                "tokenExchange",
                            ]
                        },
                        "hosts": {"type": "array", "items": {"type": "string"}},
                        "file": {"type": "string"},
                    },
                },
            },
            "timeoutSeconds": {"type": ["integer", "null"]},
            "maxResultBytes": {"type": ["integer", "null"]},
            "retryPolicy": {"type": ["object", "null"]},
            "rateLimits": {"type": ["object", "null"]},
            "auditRequirements": {"type": ["object", "null"]},
            "releaseId": _NULLABLE_STRING,
            "message": _NULLABLE_STRING,
        },
        "additionalProperties": False,
    },
    "Invocation": {
        "type": "object",
        "description": "A ToolInvocation with its pipeline stages, sandbox lease and receipt.",
        "required": [
            "name",
            "namespace",
            "uid",
            "createdAt",
            "spec",
            "status",
            "provenance",
            "toolError",
        ],
        "properties": {
            "name": {"type": "string"},
            "namespace": {"type": "string"},
            "uid": {"type": "string"},
            "createdAt": _NULLABLE_STRING,
            "spec": {"type": "object"},
            "status": {
                "type": "object",
                "properties": {
                    "state": {"type": "string"},
                    "failureClass": {
                        "type": "string",
                        "description": "tool-error or output-invalid on an Observed call "
                        "whose tool answered with an error; duplicate (Denied) on a "
                        "duplicate whose first call was deleted before it ended.",
                    },
                    "result": {
                        "type": "object",
                        "description": "The sanitized result: data from the tool, never "
                        "instructions.",
                        "properties": {
                            "provenance": {"const": "tool-result"},
                            "content": {"type": "string"},
                            "isError": {
                                "type": "boolean",
                                "description": "The tool ran to its end and answered with "
                                "an error (the call is Observed; its effect may have "
                                "happened).",
                            },
                            "exitCode": {"type": "integer"},
                            "httpStatus": {"type": "integer"},
                            "egressRefused": {
                                "type": "array",
                                "description": "A sandboxed call's connections the egress "
                                "proxy refused or could not make, with its reason (e.g. "
                                "'github.com did not resolve'): tooladapter's record beside "
                                "the tool's output, never part of content.",
                                "items": {
                                    "type": "object",
                                    "properties": {
                                        "host": {"type": "string"},
                                        "port": {"type": "integer"},
                                        "verdict": {"type": "string"},
                                        "reason": {"type": "string"},
                                        "connections": {"type": "integer"},
                                    },
                                },
                            },
                        },
                    },
                    "duplicateOf": {
                        "type": "string",
                        "description": "The first call with this idempotency key: this one "
                        "ended in its state, with its receiptRef and result, and ran nothing.",
                    },
                    "duplicateOfUid": {"type": "string"},
                    "stages": {"type": "array", "items": {"type": "object"}},
                    "sandboxLease": {"type": "object"},
                    "receipt": {"type": "object"},
                    "receiptRef": {"type": "string"},
                },
            },
            "provenance": {
                "const": "tool-result",
                "description": "What status.result is: a tool's answer, data for the model "
                "and never instructions (MCP results say the same in _meta "
                "dev.tooladapter/provenance).",
            },
            "toolError": {
                "type": "boolean",
                "description": "The tool ran to its end and answered with an error: Observed "
                "with result.isError. Its "
                "effect may have happened: not a reason to retry blindly.",
            },
        },
        "additionalProperties": False,
    },
    "EffectConfirmation": {
        "type": "object",
        "description": "What a person on call found out about an Uncertain effect.",
        "required": ["effectHappened", "evidence"],
        "properties": {
            "effectHappened": {"type": "boolean"},
            "evidence": {"type": "string", "minLength": 1, "maxLength": 4096},
        },
        "additionalProperties": False,
    },
    "ReceiptRow": {
        "type": "object",
        "required": ["invocation", "toolId", "toolVersion", "state", "receiptRef", "receipt"],
        "properties": {
            "invocation": {"type": "string"},
            "caller": {
                **_NULLABLE_STRING,
                "description": "Whose call this is (`spec.caller.name`): a run id is a label "
                "any caller in the namespace may put on its calls, not a capability.",
            },
            "toolId": _NULLABLE_STRING,
            "toolVersion": _NULLABLE_STRING,
            "state": _NULLABLE_STRING,
            "outcome": {
                "type": "string",
                "description": "The state as a person reads it: `Observed` alone is a "
                "success; `Observed: tool error (exit code 2)`, `Observed: duplicate of X`.",
            },
            "toolError": {"type": "boolean"},
            "duplicateOf": _NULLABLE_STRING,
            "declaredClass": _NULLABLE_STRING,
            "effectiveClass": _NULLABLE_STRING,
            "policyDecisionId": _NULLABLE_STRING,
            "approval": _NULLABLE_STRING,
            "requestHash": _NULLABLE_STRING,
            "resultHash": _NULLABLE_STRING,
            "receiptRef": _NULLABLE_STRING,
            "startedAt": _NULLABLE_STRING,
            "endedAt": _NULLABLE_STRING,
            "receipt": {"oneOf": [ref("Receipt"), {"type": "null"}]},
        },
        "additionalProperties": False,
    },
    "RunReceipts": {
        "type": "object",
        "required": ["namespace", "runId", "items"],
        "properties": {
            "namespace": {"type": "string"},
            "runId": {"type": "string"},
            "items": {"type": "array", "items": ref("ReceiptRow")},
        },
        "additionalProperties": False,
    },
    "Receipt": {
        "type": "object",
        "description": "A tool-invocation-v1 receipt, exactly as stored (its sha256 is its name).",
        "required": ["schema", "invocationId", "tenantId", "toolId", "state"],
        "properties": {
            "schema": {"const": "tool-invocation-v1"},
            "invocationId": {"type": "string"},
            "tenantId": {"type": "string"},
            "tenantUid": {
                **_NULLABLE_STRING,
                "description": "The uid of the namespace incarnation the call ran in (null "
                "in receipts written before it was recorded).",
            },
            "toolId": _NULLABLE_STRING,
            "state": {"type": "string"},
            "descriptorDigest": {
                **_NULLABLE_STRING,
                "description": "The digest of the descriptor spec the call was validated "
                "against (null when it never was, and in receipts written before it was "
                "recorded).",
            },
            "credentials": {
                "type": "array",
                "description": "Every credential the call carried (never a value); absent "
                "in receipts written before it was recorded.",
                "items": {
                    "type": "object",
                    "required": ["name", "source", "hosts", "file", "expiresAt"],
                    "properties": {
                        "name": {"type": "string"},
                        "source": {
                            "enum": [
                                "secretKeyRef",
                                "serviceAccountToken",
                                "oauth2ClientCredentials",
                                "tokenExchange",
                            ]
                        },
                        "hosts": {
                            "oneOf": [
                                {"type": "array", "items": {"type": "string"}},
                                {"type": "null"},
                            ],
                            "description": "The hosts whose requests carried it (HTTP).",
                        },
                        "file": {
                            **_NULLABLE_STRING,
                            "description": "The read-only file a container tool read.",
                        },
                        "expiresAt": {
                            **_NULLABLE_STRING,
                            "description": "A token's expiry (RFC 3339).",
                        },
                    },
                },
            },
            "target": {
                "oneOf": [
                    {
                        "type": "object",
                        "required": ["method", "urlTemplate", "host"],
                        "properties": {
                            "method": {"type": "string"},
                            "urlTemplate": {
                                "type": "string",
                                "description": "The descriptor's URL template as declared.",
                            },
                            "host": {
                                **_NULLABLE_STRING,
                                "description": "The template's host, or, when a placeholder "
                                "names it, the allowed host the rendered URL named (null: "
                                "it did not render).",
                            },
                        },
                    },
                    {"type": "null"},
                ],
                "description": "An http tool's request target (null for other kinds).",
            },
        },
    },
}


def model_schemas(model: type[BaseModel]) -> dict[str, Any]:
    """A pydantic model's JSON Schema as it is sent (camelCase aliases, serialisation mode)
    and every schema it refers to, as components named by their models."""
    schema = model.model_json_schema(
        by_alias=True, mode="serialization", ref_template="#/components/schemas/{model}"
    )
    defs: dict[str, Any] = schema.pop("$defs", {})
    return {**defs, model.__name__: schema}


def _add_schemas(extra: Mapping[str, Any]) -> None:
    taken = set(extra) & set(SCHEMAS)
    assert not taken, f"component schemas named twice: {sorted(taken)}"
    SCHEMAS.update(extra)


_TEXT_OPTION: Final = {"type": "string", "minLength": 1}
_add_schemas(
    {
        "DryRunRequest": {
            "type": "object",
            "description": "A call to preview: what a tools/call takes (its `_meta` options "
            "without their prefix).",
            "properties": {
                "arguments": {"type": "object", "description": "The tool's arguments."},
                "version": {
                    "type": "string",
                    "pattern": VERSION_PATTERN,
                    "maxLength": VERSION_MAX,
                    "description": "The tool version (default: the highest callable one).",
                },
                "runId": {**_TEXT_OPTION, "maxLength": 128},
                "attemptId": {**_TEXT_OPTION, "maxLength": 128},
                "idempotencyKey": {**_TEXT_OPTION, "maxLength": 256},
                "fencingToken": {"type": "integer", "minimum": 0, "maximum": 2**53 - 1},
            },
            "additionalProperties": False,
        },
        # Generated from the model the operator writes to `status.preview`, so the REST
        # dry run's document cannot drift from the CRD's.
        **model_schemas(InvocationPreview),
    }
)


def document(paths: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    for part in paths:
        for path, operations in part.items():
            merged.setdefault(path, {}).update(operations)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "tooladapter gateway",
            "version": "v1alpha1",
            "description": (
                "The HTTP API of tooladapter. Every operation but /healthz and /openapi.json "
                "takes the caller's Kubernetes bearer token and acts with it: RBAC and the "
                "admission policies apply as they do to kubectl. The MCP endpoint "
                "(streamable HTTP, stateless) is /namespaces/{namespace}/mcp."
            ),
        },
        "paths": dict(sorted(merged.items())),
        "components": {
            "schemas": SCHEMAS,
            "securitySchemes": {
                "bearer": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "A Kubernetes token of the caller (TokenReview).",
                }
            },
        },
    }
