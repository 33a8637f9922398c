"""Egress by host name: the rules (`core`, pure) and the proxy that enforces them (`proxy`).

`core` holds what a lease allows and how the wire is read: the allow rules, request
framing, masking of reflected credentials, the lease's objects, address and CIDR bounds.
It imports nothing with I/O, so the operator, the settings and the proxy share it.
`proxy` is its own process (`python -m tooladapter egress-proxy`), never on the
operator's event loop: `leases` learns open leases from the API, `server` serves CONNECT
and plain-HTTP forwarding under `core.rules`, `records` writes each lease's connections
where the operator copies them into the receipt.
"""
