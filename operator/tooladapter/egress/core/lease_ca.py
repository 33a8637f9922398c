"""The per-lease CA: how the proxy may speak TLS for a credentialed host, and nothing more.

A sandboxed tool gets its HTTP credentials over https without holding them: for a host a
credential names, the egress proxy ends the sandbox's TLS with a certificate of its own and
opens verified TLS to the real host, adding the credential there. The sandbox trusts that
certificate because its issuer, a CA made for this one lease, is in the CA bundle the pod
is handed (`ca_bundle`, named by `CA_BUNDLE_VARIABLES` and a wgetrc).

What bounds that CA:

- it is made by the operator when it brokers the call, EC P-256, valid from now until the
  grant expires, `CA:TRUE, pathlen:0` (it signs leaves only);
- its name constraints permit only the credential hosts (`*.suffix` as `.suffix`), so a
  leaf for any other name does not verify even if the key leaked;
- its key lives only in the grant Secret in the proxy's namespace (which only the operator
  and the proxy read), never in the tenant's namespace; the pod gets the certificate, which
  is public. The grant is deleted at the call's end: the CA dies with it.

Pure: builds PEM text; nothing here reads or writes Kubernetes.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from tooladapter.egress.core.rules import split_authority

#: The grant Secret's keys for the CA (`egress.core.lease.build_grant_secret`).
CA_KEY_KEY = "ca.key"
CA_CERT_KEY = "ca.crt"
#: A leaf lives this long at most (and never past its CA); the proxy caches it per lease.
LEAF_SECONDS = 3600
#: Clocks differ: certificates start this much before now.
BACKDATE_SECONDS = 300
#: The variables that make curl, wget (through its wgetrc), git, Python (ssl, requests)
#: and Node trust the bundle unmodified.
CA_BUNDLE_VARIABLES = (
    "SSL_CERT_FILE",
    "CURL_CA_BUNDLE",
    "REQUESTS_CA_BUNDLE",
    "GIT_SSL_CAINFO",
    "NODE_EXTRA_CA_CERTS",
)


@dataclass(frozen=True)
class LeaseCA:
    """One lease's CA as PEM text; `key_pem` goes only into the grant Secret."""

    cert_pem: str
    key_pem: str

    def certificate(self) -> x509.Certificate:
        return x509.load_pem_x509_certificate(self.cert_pem.encode())


def host_name(entry: str) -> str:
    """The name of an `inject.hosts` entry (`host`, `host:port`, `*.suffix[:port]`)."""
    return split_authority(entry, 443)[0] if not entry.startswith("*.") else entry


def permitted_names(hosts: tuple[str, ...] | list[str]) -> list[str]:
    """The CA's permitted DNS subtrees: each credential host, `*.suffix` as `.suffix`
    (subdomains only, as the wildcard means); IP literals are left out (no leaf is made
    for them: such a CONNECT stays end to end)."""
    names: list[str] = []
    for entry in hosts:
        name = entry
        if name.startswith("*."):
            suffix = name[1:]
            name = suffix.rsplit(":", 1)[0] if suffix.rsplit(":", 1)[-1].isdigit() else suffix
        else:
            name = host_name(name)
            if _is_ip(name):
                continue
        name = name.lower().rstrip(".")
        if name and name not in names:
            names.append(name)
    return names


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def make_lease_ca(
    *, uid: str, hosts: tuple[str, ...] | list[str], not_after: dt.datetime, now: dt.datetime
) -> LeaseCA:
    """A CA for lease `uid`, constrained to `hosts`, valid until `not_after`."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "tooladapter egress"),
            x509.NameAttribute(NameOID.COMMON_NAME, f"tooladapter lease {uid[:36]}"),
        ]
    )
    permitted = [x509.DNSName(n) for n in permitted_names(hosts)]
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(seconds=BACKDATE_SECONDS))
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=False,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
    )
    if permitted:
        builder = builder.add_extension(
            x509.NameConstraints(permitted_subtrees=permitted, excluded_subtrees=None),
            critical=True,
        )
    cert = builder.sign(key, hashes.SHA256())
    return LeaseCA(
        cert_pem=cert.public_bytes(serialization.Encoding.PEM).decode(),
        key_pem=key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ).decode(),
    )


def issue_leaf(ca: LeaseCA, host: str, *, now: dt.datetime) -> tuple[str, str]:
    """(certificate chain PEM, key PEM) of a server certificate for `host`, signed by the
    lease CA: `LEAF_SECONDS` at most, never past the CA."""
    ca_cert = ca.certificate()
    ca_key = serialization.load_pem_private_key(ca.key_pem.encode(), password=None)
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    key = ec.generate_private_key(ec.SECP256R1())
    not_after = min(now + dt.timedelta(seconds=LEAF_SECONDS), ca_cert.not_valid_after_utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host[:64])]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(seconds=BACKDATE_SECONDS))
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(host)]), critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    chain = cert.public_bytes(serialization.Encoding.PEM).decode()
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    return chain, key_pem


def ca_bundle(system_pem: str, ca_cert_pem: str) -> str:
    """The pod's one trust bundle: the system CAs, then the lease CA."""
    system = system_pem if system_pem.endswith("\n") or not system_pem else system_pem + "\n"
    return system + ca_cert_pem


def wgetrc(bundle_path: str) -> str:
    """A wgetrc naming the bundle (wget reads no CA variable)."""
    return f"ca_certificate = {bundle_path}\n"


def ca_env(bundle_path: str, wgetrc_path: str) -> dict[str, str]:
    """The variables naming the bundle (`CA_BUNDLE_VARIABLES`) and the wgetrc."""
    env = dict.fromkeys(CA_BUNDLE_VARIABLES, bundle_path)
    env["WGETRC"] = wgetrc_path
    return env


__all__ = [
    "CA_BUNDLE_VARIABLES",
    "CA_CERT_KEY",
    "CA_KEY_KEY",
    "LEAF_SECONDS",
    "LeaseCA",
    "ca_bundle",
    "ca_env",
    "issue_leaf",
    "make_lease_ca",
    "permitted_names",
    "wgetrc",
]
