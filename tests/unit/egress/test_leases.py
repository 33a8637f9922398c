"""Which credential a request through the proxy carries (`egress.proxy.leases`): read from
the grant the operator wrote, judged by `credentials.requests` with the port exact."""

from __future__ import annotations

from typing import Any

import pytest

from tooladapter.egress.core.lease import CredentialGrant, LeaseGrant, build_grant_secret
from tooladapter.egress.proxy.leases import Lease, lease_of
from tooladapter.timeutil import in_seconds


def lease(*grants: CredentialGrant) -> Lease:
    grant = LeaseGrant(
        "uid-1", "tenant-a", "call-1", ("api.example.com",), tuple(grants), in_seconds(60)
    )
    values: dict[str, str] = {}
    for item in grants:
        values[item.key] = f"Bearer value-of-{item.name}"
        values[f"{item.key}-raw"] = f"value-of-{item.name}"
    secret = build_grant_secret(namespace="sys", grant=grant, token="t", values=values)
    return lease_of(secret)


def grant(name: str, *hosts: str, index: int = 0, **fields: Any) -> CredentialGrant:
    return CredentialGrant(
        name=name, hosts=hosts, header="Authorization", key=f"credential-{index}", **fields
    )


def test_the_grant_carries_header_value_and_raw_value() -> None:
    (credential,) = lease(grant("api", "api.example.com")).credentials
    assert credential.header == "Authorization"
    assert credential.value == "Bearer value-of-api"
    assert credential.secret == "value-of-api"


@pytest.mark.parametrize(
    ("port", "expected"),
    [(None, True), (443, True), (80, False), (8443, False)],
)
def test_an_entry_without_a_port_matches_no_port_and_443_only(
    port: int | None, expected: bool
) -> None:
    table = lease(grant("api", "api.example.com"))
    assert (table.credential_for("api.example.com", port, "GET", "/", ()) is not None) is expected


@pytest.mark.parametrize(
    ("port", "expected"),
    [(None, False), (443, False), (8443, True), (9443, False)],
)
def test_an_entrys_port_is_honoured_exactly(port: int | None, expected: bool) -> None:
    table = lease(grant("api", "api.example.com:8443"))
    assert (table.credential_for("api.example.com", port, "GET", "/", ()) is not None) is expected


def test_another_host_gets_nothing() -> None:
    table = lease(grant("api", "api.example.com"))
    assert table.credential_for("other.example.com", None, "GET", "/", ()) is None
    assert table.credential_for("api.example.com.evil.test", None, "GET", "/", ()) is None


def test_methods_and_paths_narrow_it() -> None:
    table = lease(grant("api", "api.example.com", methods=("GET",), paths=("/v1/",)))
    assert table.credential_for("api.example.com", None, "GET", "/v1/items", ()) is not None
    assert table.credential_for("api.example.com", None, "POST", "/v1/items", ()) is None
    assert table.credential_for("api.example.com", None, "GET", "/v2/items", ()) is None
    assert table.credential_for("api.example.com", None, "GET", "/v1/%2e%2e/admin", ()) is None
    assert table.credential_for("api.example.com", None, "GET", "/v1/x?to=/admin", ()) is not None


def test_a_method_override_header_is_judged_as_a_method() -> None:
    table = lease(grant("api", "api.example.com", methods=("GET",)))
    override = [("X-HTTP-Method-Override", "DELETE")]
    assert table.credential_for("api.example.com", None, "GET", "/", override) is None
    allowed = [("X-Method-Override", "GET")]
    assert table.credential_for("api.example.com", None, "GET", "/", allowed) is not None


def test_the_first_matching_credential_wins_and_each_keeps_its_own_value() -> None:
    table = lease(
        grant("reads", "api.example.com", index=0, methods=("GET",)),
        grant("writes", "api.example.com", index=1),
    )
    read = table.credential_for("api.example.com", None, "GET", "/", ())
    write = table.credential_for("api.example.com", None, "PUT", "/", ())
    assert read is not None and read.value == "Bearer value-of-reads"
    assert write is not None and write.value == "Bearer value-of-writes"


def test_a_grant_round_trips_its_credentials() -> None:
    item = grant("api", "*.example.com", "api.example.com:8443", methods=("GET",), paths=None)
    assert CredentialGrant.from_document(item.document()) == item
    (credential,) = lease(item).credentials
    assert credential.inject.hosts == ["*.example.com", "api.example.com:8443"]
    assert credential.inject.methods == ["GET"] and credential.inject.paths is None
