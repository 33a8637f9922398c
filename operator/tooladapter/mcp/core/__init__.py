"""The pure rules and types of MCP: no SDK, no I/O."""
