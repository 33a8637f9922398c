"""Verified TLS to the APIs credentials go to: one construction for the egress proxy (its
credentialed upstreams) and the operator's http tools alike.

The system's CAs, plus the bundle `TOOLADAPTER_EGRESS_CA_FILE` names when it is set (a
private CA, or the test CA of the integration tests). Verification is never turned off: a
credential goes only to a server that proves it is the host the credential names.
"""

from __future__ import annotations

import ssl


def verified_context(ca_file: str | None) -> ssl.SSLContext:
    """A client context checking certificates and host names: the system's CAs plus
    `ca_file` (raises when the file cannot be read: a trust anchor that silently went
    missing would turn every credentialed call into a TLS failure far from its cause)."""
    context = ssl.create_default_context()
    if ca_file:
        context.load_verify_locations(ca_file)
    return context
