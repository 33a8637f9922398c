"""The lease-scoped egress proxy: `python -m tooladapter egress-proxy`.

Its own process, never on the operator's event loop: `leases` learns open leases from the
API, `proxy` serves CONNECT and plain-HTTP forwarding under `pipeline.egress`'s rules,
`records` writes each lease's connections where the operator copies them into the receipt.
"""
