"""The per-lease CA (`egress.core.lease_ca`): its constraints, its expiry, its leaves, and
where its key and certificate go (`egress.core.lease`)."""

from __future__ import annotations

import base64
import datetime as dt
import socket
import ssl
import threading
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec

from tooladapter.egress.core.lease import (
    CA_BUNDLE_KEY,
    WGETRC_KEY,
    LeaseGrant,
    build_grant_secret,
    build_proxy_secret,
)
from tooladapter.egress.core.lease_ca import (
    CA_BUNDLE_VARIABLES,
    CA_CERT_KEY,
    CA_KEY_KEY,
    LeaseCA,
    ca_bundle,
    issue_leaf,
    make_lease_ca,
    permitted_names,
)
from tooladapter.sandbox.job import egress_ca_trust

NOW = dt.datetime.now(dt.UTC).replace(microsecond=0)
UNTIL = NOW + dt.timedelta(minutes=10)


@pytest.fixture(scope="module")
def ca() -> LeaseCA:
    return make_lease_ca(
        uid="lease-1",
        hosts=["api.example.test", "git.example.test:8443", "*.wild.example.test"],
        not_after=UNTIL,
        now=NOW,
    )


def test_the_ca_signs_leaves_only_for_the_credential_hosts_until_the_grant_expires(
    ca: LeaseCA,
) -> None:
    cert = ca.certificate()
    basic = cert.extensions.get_extension_for_class(x509.BasicConstraints)
    assert basic.critical and basic.value.ca and basic.value.path_length == 0
    names = cert.extensions.get_extension_for_class(x509.NameConstraints)
    assert names.critical
    assert [n.value for n in names.value.permitted_subtrees or []] == [
        "api.example.test",
        "git.example.test",
        ".wild.example.test",
    ]
    assert cert.not_valid_after_utc == UNTIL
    assert cert.not_valid_before_utc <= NOW
    key = cert.public_key()
    assert isinstance(key, ec.EllipticCurvePublicKey) and key.curve.name == "secp256r1"


def test_ip_literals_and_ports_do_not_reach_the_constraints() -> None:
    assert permitted_names(["10.0.0.1", "a.test:444", "*.b.test:8443", "A.Test"]) == [
        "a.test",
        ".b.test",
    ]


def handshake(ca: LeaseCA, tmp_path: Path, leaf_host: str, server_name: str) -> None:
    """A TLS handshake with a server holding a leaf for `leaf_host`, as a client that trusts
    only the lease CA and asks for `server_name`; raises ssl.SSLError when it fails."""
    chain, key = issue_leaf(ca, leaf_host, now=NOW)
    pem = tmp_path / f"{leaf_host}.pem"
    pem.write_text(key + chain)
    server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_context.load_cert_chain(pem)
    client_context = ssl.create_default_context(cadata=ca.cert_pem)
    left, right = socket.socketpair()

    def serve() -> None:
        try:
            with server_context.wrap_socket(left, server_side=True) as tls:
                tls.recv(1)
        except (ssl.SSLError, OSError):
            pass

    thread = threading.Thread(target=serve)
    thread.start()
    try:
        with client_context.wrap_socket(right, server_hostname=server_name) as tls:
            tls.sendall(b"x")
    finally:
        right.close()
        thread.join(10)


def test_a_leaf_for_a_credential_host_verifies_against_the_lease_ca(
    ca: LeaseCA, tmp_path: Path
) -> None:
    handshake(ca, tmp_path, "api.example.test", "api.example.test")
    handshake(ca, tmp_path, "x.wild.example.test", "x.wild.example.test")


@pytest.mark.parametrize(
    "host", ["evil.example.test", "wild.example.test", "api.example.test.evil"]
)
def test_a_leaf_for_another_name_fails_verification_even_signed_by_the_ca_key(
    ca: LeaseCA, tmp_path: Path, host: str
) -> None:
    # As if the CA key leaked: its name constraints still stop a leaf for another host.
    with pytest.raises(ssl.SSLCertVerificationError):
        handshake(ca, tmp_path, host, host)


def test_a_leaf_never_outlives_its_ca(ca: LeaseCA) -> None:
    chain, _key = issue_leaf(ca, "api.example.test", now=NOW)
    leaf = x509.load_pem_x509_certificate(chain.encode())
    assert leaf.not_valid_after_utc <= UNTIL
    basic = leaf.extensions.get_extension_for_class(x509.BasicConstraints)
    assert not basic.value.ca


def test_the_key_goes_only_to_the_grant_and_the_certificate_to_the_pod(ca: LeaseCA) -> None:
    grant = LeaseGrant("u1", "tenant", "call", ("api.example.test",), (), "2030-01-01T00:00:00Z")
    secret = build_grant_secret(namespace="sys", grant=grant, token="t", values={}, ca=ca)
    assert base64.b64decode(secret["data"][CA_KEY_KEY]).decode() == ca.key_pem
    assert base64.b64decode(secret["data"][CA_CERT_KEY]).decode() == ca.cert_pem
    bundle = ca_bundle("-----SYSTEM-----", ca.cert_pem)
    proxy = build_proxy_secret(
        namespace="tenant", uid="u1", owner={}, url="http://u1:t@proxy:1", ca_bundle=bundle
    )
    pod_side = {k: base64.b64decode(v).decode() for k, v in proxy["data"].items()}
    assert pod_side[CA_BUNDLE_KEY] == "-----SYSTEM-----\n" + ca.cert_pem
    assert "PRIVATE KEY" not in str(pod_side) and ca.key_pem not in str(pod_side)
    assert pod_side[WGETRC_KEY] == "ca_certificate = /tooladapter/egress-ca/ca-bundle.pem\n"
    without = build_grant_secret(namespace="sys", grant=grant, token="t", values={})
    assert CA_KEY_KEY not in without["data"]


def test_a_job_mounts_the_bundle_and_names_it_for_every_tool() -> None:
    mounts: list[dict[str, object]] = []
    volumes: list[dict[str, object]] = []
    env = {e["name"]: e["value"] for e in egress_ca_trust("u1", mounts, volumes)}
    assert {name: env[name] for name in CA_BUNDLE_VARIABLES} == dict.fromkeys(
        CA_BUNDLE_VARIABLES, "/tooladapter/egress-ca/ca-bundle.pem"
    )
    assert env["WGETRC"] == "/tooladapter/egress-ca/wgetrc"
    (volume,) = volumes
    assert volume["secret"] == {
        "secretName": "ta-proxy-u1",
        # The URL key (the proxy token) stays out of the file system.
        "items": [
            {"key": "ca-bundle.pem", "path": "ca-bundle.pem"},
            {"key": "wgetrc", "path": "wgetrc"},
        ],
        "defaultMode": 0o444,
    }
    assert mounts == [
        {"name": "egress-ca", "mountPath": "/tooladapter/egress-ca", "readOnly": True}
    ]
