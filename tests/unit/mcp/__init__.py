"""Unit tests of MCP: rules, approvals in the client, servers, the endpoint."""
