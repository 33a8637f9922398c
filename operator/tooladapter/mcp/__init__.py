"""MCP servers: the pure rules and types (`core`) and the client that talks to them.

`core` imports nothing with I/O: server digests, bindings, shadowing and output checks
(`rules`), approvals that reach the person at the client's keyboard (`approvals`), the
errors and results of an exchange (`types`). `client` holds the SDK, loaded on the first
exchange. The doors stay where their layer is: `gateway.mcp_endpoint` (our MCP endpoint),
`executors.mcp` (a call of an mcp tool), `handlers.mcp` (McpServer lifecycle).
"""
