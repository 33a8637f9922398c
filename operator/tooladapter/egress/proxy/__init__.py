"""The lease-scoped egress proxy process: leases, the server, connection records."""
