"""Set-ups the credential modules share: an operator and egress proxy in front of a TLS
upstream on the node, an operator whose http tools reach loopback TLS servers under test
names, and a fresh namespace of either. Each module keeps its own fixtures (their scope and
prefix are its own) and builds them from these."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager
from pathlib import Path

import pytest

from tests.integration.servers import tls_server
from tooladapter.devtools import EgressProxyProcess, Namespace, OperatorProcess, node_ip
from tooladapter.devtools.tls import make_certificates

#: `with egress_operator(scope, hosts, ca, settings) as (operator, proxy)`.
EgressOperator = Callable[..., AbstractContextManager[tuple[OperatorProcess, EgressProxyProcess]]]
#: A TLS upstream's port and the request heads it got, the operator and the proxy.
Upstream = tuple[int, list[bytes], OperatorProcess, EgressProxyProcess]


@contextlib.contextmanager
def proxied_upstream(
    tmp_path_factory: pytest.TempPathFactory,
    egress_operator: EgressOperator,
    prefix: str,
    hosts: list[str],
    answer: Callable[[bytes], bytes],
    settings: Mapping[str, str] | None = None,
) -> Iterator[Upstream]:
    """A TLS server on the node answering as `answer` does, with a certificate for every
    name of `hosts` (of a CA the proxy trusts), and an operator and egress proxy serving
    `prefix-*` that reach those names there."""
    certs = make_certificates(tmp_path_factory.mktemp("tls"), hosts)
    with (
        tls_server(node_ip(), certs, answer) as (port, heads),
        egress_operator(prefix, hosts, certs.ca, settings) as (operator, proxy),
    ):
        yield port, heads, operator, proxy


def loopback_settings(hosts: list[str], ca: Path, **more: str) -> dict[str, str]:
    """An operator's settings by which its http tools reach every name of `hosts` on
    loopback over TLS verified against `ca`."""
    return {
        "TOOLADAPTER_EGRESS_HOSTS": ",".join(f"{host}=127.0.0.1" for host in hosts),
        "TOOLADAPTER_EGRESS_CA_FILE": str(ca),
        **more,
    }


def deleted_after(namespace: Namespace) -> Iterator[Namespace]:
    """A namespace fixture's body, `yield from deleted_after(...)`: the namespace for the
    test, deleted after it."""
    yield namespace
    namespace.delete()
