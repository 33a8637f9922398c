"""The objects of one lease's egress: what the operator hands the proxy and the pod.

Two Secrets per lease with host egress, both made at brokering and deleted when the call
ends (which ends the lease for the proxy at once):

- the *grant*, `ta-egress-<uid>` in the proxy's namespace (`tooladapter-system`): the
  lease's allow-list, the sha256 of its token, its expiry, and the values of the
  credentials the proxy injects. The proxy watches only this namespace, so its RBAC is a
  Role there, never cluster-wide Secret reads; and the token itself is not in it.
- the *proxy URL*, `ta-proxy-<uid>` in the tenant's namespace, owned by the invocation:
  `http://<uid>:<token>@<proxy>:<port>`, which the pod gets as `HTTP(S)_PROXY` through a
  secretKeyRef (so it is not in the Job's spec either).

The proxy records connections in the ConfigMap `ta-egress-<uid>` beside the grant, one key
per proxy replica (`records.<replica>`): the operator stores the whole list in the artifact
store and counts it per host into the status and the receipt (`egress.core.tally`).
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tooladapter.egress.core.lease_ca import (
    CA_CERT_KEY,
    CA_KEY_KEY,
    LeaseCA,
    ca_env,
    wgetrc,
)
from tooladapter.naming import (
    ANNOTATION_INVOCATION_REF,
    LABEL_INVOCATION_UID,
    LABEL_MANAGED_BY,
    MANAGED_BY,
    LeaseNames,
)

#: Grants carry this label; the proxy watches Secrets with it.
LABEL_EGRESS = "tooladapter.dev/egress-lease"
GRANT_KEY = "lease.json"
TOKEN_HASH_KEY = "token-sha256"  # noqa: S105 (a key name)
PROXY_URL_KEY = "url"
RECORDS_PREFIX = "records."


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True)
class CredentialGrant:
    """One HTTP credential as the proxy injects it: which requests carry which header."""

    name: str
    #: `inject.hosts`: `host`, `host:port` or `*.suffix[:port]` (no port: 443, as the
    #: proxy speaks TLS upstream for a plain-http request that carries a credential).
    hosts: tuple[str, ...]
    header: str
    #: The grant Secret's key that holds the header's value (`<key>-raw`: the bare value,
    #: which an answer must never hand back).
    key: str
    methods: tuple[str, ...] | None = None
    paths: tuple[str, ...] | None = None

    def document(self) -> dict[str, object]:
        return {
            "name": self.name,
            "hosts": list(self.hosts),
            "header": self.header,
            "key": self.key,
            "methods": list(self.methods) if self.methods is not None else None,
            "paths": list(self.paths) if self.paths is not None else None,
        }

    @classmethod
    def from_document(cls, doc: Mapping[str, Any]) -> CredentialGrant:
        methods, paths = doc.get("methods"), doc.get("paths")
        return cls(
            name=str(doc["name"]),
            hosts=tuple(str(h) for h in doc["hosts"]),
            header=str(doc["header"]),
            key=str(doc["key"]),
            methods=tuple(str(m) for m in methods) if methods is not None else None,
            paths=tuple(str(p) for p in paths) if paths is not None else None,
        )


@dataclass(frozen=True)
class LeaseGrant:
    uid: str
    namespace: str
    invocation: str
    allow: tuple[str, ...]
    credentials: tuple[CredentialGrant, ...]
    expires_at: str

    def document(self) -> str:
        return json.dumps(
            {
                "uid": self.uid,
                "namespace": self.namespace,
                "invocation": self.invocation,
                "allow": list(self.allow),
                "credentials": [c.document() for c in self.credentials],
                "expiresAt": self.expires_at,
            },
            separators=(",", ":"),
        )

    @classmethod
    def from_document(cls, text: str) -> LeaseGrant:
        """Raises ValueError (or KeyError/TypeError) on a document this code did not write."""
        doc = json.loads(text)
        return cls(
            uid=str(doc["uid"]),
            namespace=str(doc["namespace"]),
            invocation=str(doc["invocation"]),
            allow=tuple(str(a) for a in doc["allow"]),
            credentials=tuple(CredentialGrant.from_document(c) for c in doc["credentials"]),
            expires_at=str(doc["expiresAt"]),
        )


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def build_grant_secret(
    *,
    namespace: str,
    grant: LeaseGrant,
    token: str,
    values: Mapping[str, str],
    ca: LeaseCA | None = None,
) -> dict[str, Any]:
    """The grant in the proxy's namespace (no owner: owners cannot cross namespaces; the
    operator deletes it at the call's end and the reaper finds it by its annotation).
    `ca`: the lease CA (`egress.core.lease_ca`), whose key is kept here and nowhere else."""
    data = {
        GRANT_KEY: _b64(grant.document()),
        TOKEN_HASH_KEY: _b64(token_digest(token)),
        **{key: _b64(value) for key, value in values.items()},
        **ca_grant_data(ca),
    }
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {
            "name": LeaseNames.for_uid(grant.uid).egress,
            "namespace": namespace,
            "labels": {
                LABEL_MANAGED_BY: MANAGED_BY,
                LABEL_INVOCATION_UID: grant.uid,
                LABEL_EGRESS: "true",
            },
            "annotations": {ANNOTATION_INVOCATION_REF: f"{grant.namespace}/{grant.invocation}"},
        },
        "data": data,
    }


def proxy_url(*, address: str, port: int, uid: str, token: str) -> str:
    host = f"[{address}]" if ":" in address else address
    return f"http://{uid}:{token}@{host}:{port}"


def token_of(url: str) -> str | None:
    """The token in a proxy URL (`proxy_url`'s form)."""
    userinfo = url.partition("://")[2].partition("@")
    if not userinfo[1]:
        return None
    return userinfo[0].partition(":")[2] or None


def ca_grant_data(ca: LeaseCA | None) -> dict[str, str]:
    """The grant Secret's CA keys (base64), none without a lease CA."""
    if ca is None:
        return {}
    return {CA_KEY_KEY: _b64(ca.key_pem), CA_CERT_KEY: _b64(ca.cert_pem)}


#: The proxy Secret's keys for the pod's trust: the bundle (system CAs and the lease CA's
#: certificate, all public) and a wgetrc naming it.
CA_BUNDLE_KEY = "ca-bundle.pem"
WGETRC_KEY = "wgetrc"
#: Where a Job's container finds them (a read-only mount of those two keys only).
CA_MOUNT = "/tooladapter/egress-ca"
CA_VOLUME = "egress-ca"


def ca_proxy_data(bundle: str | None) -> dict[str, str]:
    """The proxy Secret's trust keys (base64), none without a lease CA."""
    if bundle is None:
        return {}
    return {CA_BUNDLE_KEY: _b64(bundle), WGETRC_KEY: _b64(wgetrc(f"{CA_MOUNT}/{CA_BUNDLE_KEY}"))}


def ca_pod_env() -> list[dict[str, Any]]:
    """A Job's variables naming the mounted bundle and wgetrc (`lease_ca.ca_env`)."""
    env = ca_env(f"{CA_MOUNT}/{CA_BUNDLE_KEY}", f"{CA_MOUNT}/{WGETRC_KEY}")
    return [{"name": name, "value": value} for name, value in env.items()]


def ca_pod_volume(uid: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(volume, mount) of a Job's trust files: the proxy Secret's bundle and wgetrc keys
    only (its URL key stays out of the file system)."""
    volume = {
        "name": CA_VOLUME,
        "secret": {
            "secretName": LeaseNames.for_uid(uid).proxy_secret,
            "items": [
                {"key": CA_BUNDLE_KEY, "path": CA_BUNDLE_KEY},
                {"key": WGETRC_KEY, "path": WGETRC_KEY},
            ],
            "defaultMode": 0o444,
        },
    }
    return volume, {"name": CA_VOLUME, "mountPath": CA_MOUNT, "readOnly": True}


def build_proxy_secret(
    *, namespace: str, uid: str, owner: dict[str, Any], url: str, ca_bundle: str | None = None
) -> dict[str, Any]:
    """The pod's proxy URL; with a lease CA, also its trust bundle and wgetrc."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {
            "name": LeaseNames.for_uid(uid).proxy_secret,
            "namespace": namespace,
            "labels": {LABEL_MANAGED_BY: MANAGED_BY, LABEL_INVOCATION_UID: uid},
            "ownerReferences": [owner],
        },
        "data": {PROXY_URL_KEY: _b64(url), **ca_proxy_data(ca_bundle)},
    }


def proxy_env(uid: str, no_proxy: list[str]) -> list[dict[str, Any]]:
    """The pod's proxy variables: upper and lower case (curl reads only `http_proxy`
    lower-case), the URL from the lease's Secret, and the CIDR entries as NO_PROXY (the
    NetworkPolicy lets them out directly)."""
    ref = {"secretKeyRef": {"name": LeaseNames.for_uid(uid).proxy_secret, "key": PROXY_URL_KEY}}
    env: list[dict[str, Any]] = [
        {"name": name, "valueFrom": ref}
        for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy")
    ]
    bypass = ",".join(no_proxy)
    env += [{"name": "NO_PROXY", "value": bypass}, {"name": "no_proxy", "value": bypass}]
    return env


def records_from(data: Mapping[str, str] | None) -> list[dict[str, Any]]:
    """Every replica's records of a lease (`records.*` keys), oldest first, all of them (each
    proxy bounds its own by folding: `egress.core.tally`); a key that does not parse is
    skipped."""
    found: list[dict[str, Any]] = []
    for key, text in (data or {}).items():
        if not key.startswith(RECORDS_PREFIX):
            continue
        try:
            items = json.loads(text)
        except ValueError:
            continue
        if isinstance(items, list):
            found.extend(item for item in items if isinstance(item, dict))
    found.sort(key=lambda r: str(r.get("at") or ""))
    return found


__all__ = [
    "CA_BUNDLE_KEY",
    "CA_MOUNT",
    "GRANT_KEY",
    "LABEL_EGRESS",
    "PROXY_URL_KEY",
    "RECORDS_PREFIX",
    "TOKEN_HASH_KEY",
    "WGETRC_KEY",
    "CredentialGrant",
    "LeaseGrant",
    "build_grant_secret",
    "build_proxy_secret",
    "ca_grant_data",
    "ca_pod_env",
    "ca_pod_volume",
    "ca_proxy_data",
    "proxy_env",
    "proxy_url",
    "records_from",
    "token_digest",
    "token_of",
]
