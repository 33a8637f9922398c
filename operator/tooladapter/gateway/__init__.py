"""The HTTP API and MCP endpoint, served by every operator process (a standby included).

Stateless: each request is authenticated with a TokenReview of the caller's bearer token,
and everything it reads or creates goes through the API server with that same token
(`kube.callers`), so RBAC and the admission policies apply to the caller exactly as they
do to `kubectl`. The operator's own identity only reviews tokens and access.

- `server`: the aiohttp application, its listener (TLS optional) and its life cycle.
- `auth`: bearer tokens, the TokenReview cache, the caller of a request.
- `errors`: problem documents for every error.
- `routes/`: one module per REST resource, each with its handlers and OpenAPI paths.
- `mcp_endpoint` (with `asgi`): `/namespaces/{namespace}/mcp` on the `mcp` SDK's server.
- `tools`, `calls`: the tool list and the tools/call flow that both interfaces share.
"""

from tooladapter.gateway.server import Gateway, GatewayPortTaken, check_port

__all__ = ["Gateway", "GatewayPortTaken", "check_port"]
