"""Verified TLS to the APIs credentials go to: one construction for the egress proxy (its
credentialed upstreams) and the operator's http tools and token endpoints alike.

The system's CAs, plus the bundles named when set: `TOOLADAPTER_EGRESS_CA_FILE` (the proxy
and the operator) and `TOOLADAPTER_CA_BUNDLE` (the operator's own outbound TLS; the chart's
`caBundle`), a private CA or the test CA of the integration tests. Verification is never
turned off: a credential goes only to a server that proves it is the host the credential
names.
"""

from __future__ import annotations

import functools
import os
import ssl
from collections.abc import Mapping


def verified_context(ca_file: str | None) -> ssl.SSLContext:
    """A client context checking certificates and host names: the system's CAs plus
    `ca_file` (raises when the file cannot be read: a trust anchor that silently went
    missing would turn every credentialed call into a TLS failure far from its cause)."""
    context = ssl.create_default_context()
    if ca_file:
        context.load_verify_locations(ca_file)
    return context


def settings_context(files: Mapping[str, str | os.PathLike[str] | None]) -> ssl.SSLContext:
    """`verified_context` over every bundle the settings name (variable -> path, unset
    ones skipped); one that cannot be read or holds no certificate raises ValueError
    naming its variable and path."""
    context = ssl.create_default_context()
    for variable, ca_file in files.items():
        if not ca_file:
            continue
        try:
            context.load_verify_locations(ca_file)
        except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError
            raise ValueError(f"{variable}={os.fspath(ca_file)}: {exc}") from None
    return context


#: The operator's own system bundle, where it usually is when certifi is absent.
SYSTEM_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"


@functools.cache
def system_bundle() -> str:
    """The system CAs as PEM text, read once: certifi's bundle when installed, else
    `SYSTEM_BUNDLE` (empty when neither exists: the pod then trusts the lease CA only,
    which is enough for the credentialed hosts)."""
    try:
        import certifi

        path = certifi.where()
    except ImportError:
        path = SYSTEM_BUNDLE
    try:
        with open(path, encoding="ascii", errors="replace") as handle:
            return handle.read()
    except OSError:
        return ""
