"""`spec.credentials` checked against the tool's kind, sandbox and egress.

The CRD refuses the same at apply (`model.descriptor._credential_rules`, CEL); this says it
with the entry's index and keeps objects stored before a rule existed inactive.
"""

from __future__ import annotations

import ipaddress
import re
from urllib.parse import urlsplit

from tooladapter.credentials.requests import hosts_allowed
from tooladapter.egress.core.addresses import address_kind
from tooladapter.enums import ToolKind, WorkspaceMode
from tooladapter.model import CredentialSource, McpServerSpec, ToolDescriptorSpec

_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_SECRET_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")
#: What a resolver may read as an IPv4 address (`inet_aton`): decimal, octal or hex parts,
#: one to four of them (`167772161`, `0x7f.1`, `0177.0.0.1`, `10.1`).
_LOOSE_IPV4 = re.compile(r"^(0x[0-9a-f]*|[0-9]+)(\.(0x[0-9a-f]*|[0-9]+)){0,3}$")


def egress_of(spec: ToolDescriptorSpec) -> list[str] | None:
    """The tool's explicit egress (None: it sets none, so a default would apply)."""
    if spec.kind is ToolKind.HTTP:
        hosts = spec.http.allowed_hosts if spec.http is not None else []
        return list(hosts) or None
    if spec.sandbox is None or spec.sandbox.egress.allow is None:
        return None
    return list(spec.sandbox.egress.allow)


def check_credentials(spec: ToolDescriptorSpec) -> list[str]:
    """Every problem of a descriptor's `credentials` (empty: none)."""
    if not spec.credentials:
        return []
    problems: list[str] = []
    if spec.kind in (ToolKind.NATIVE, ToolKind.MCP):
        return [
            "credentials: native tools take none, and an mcp tool's credentials are "
            "declared on its McpServer"
        ]
    allow = egress_of(spec)
    if allow is None:
        problems.append(
            "credentials: a tool that declares credentials must set its egress explicitly "
            "(http.allowedHosts for an http tool, sandbox.egress.allow otherwise)"
        )
    attempt = spec.sandbox is not None and spec.sandbox.workspace == WorkspaceMode.ATTEMPT
    names: set[str] = set()
    files: set[str] = set()
    for index, credential in enumerate(spec.credentials):
        where = f"credentials[{index}]"
        if credential.name in names:
            problems.append(f"{where}.name: {credential.name!r} is declared twice")
        names.add(credential.name)
        problems.extend(_source_problems(credential.source, where))
        inject = credential.inject
        if inject.file is not None and credential.source.issued is not None:
            problems.append(
                f"{where}.inject.file: a token an issuer mints per call goes to HTTP requests "
                "(inject.hosts), not to a file"
            )
        if inject.file is not None:
            if spec.kind is not ToolKind.CONTAINER:
                problems.append(
                    f"{where}.inject.file: only a container tool (a fixed sandbox.command) "
                    f"takes a credential file, not a {spec.kind.value} tool"
                )
            if attempt:
                problems.append(
                    f"{where}.inject.file: not with sandbox.workspace attempt: a workspace "
                    "outlives its calls"
                )
            if inject.file in files:
                problems.append(f"{where}.inject.file: {inject.file} is used twice")
            files.add(inject.file)
        elif allow is not None:
            for host in hosts_allowed(inject.hosts or [], allow):
                problems.append(
                    f"{where}.inject.hosts: {host!r} is not allowed by the tool's egress "
                    f"({', '.join(allow)})"
                )
    return problems


def check_server_credentials(spec: McpServerSpec) -> list[str]:
    """Every problem of an McpServer's `credentials` (empty: none)."""
    problems: list[str] = []
    url = urlsplit(spec.url)
    host = (url.hostname or "").lower()
    # As the executor judges it (`carries_url`): an entry without a port means the scheme's
    # default, so a url on another port needs the entry to name it.
    default = 443 if url.scheme == "https" else 80
    port = url.port or default
    targets = {f"{host}:{port}"} | ({host} if port == default else set())
    for index, credential in enumerate(spec.credentials):
        where = f"credentials[{index}]"
        problems.extend(_source_problems(credential.source, where))
        if credential.source.issued is not None:
            problems.append(
                f"{where}.source.{credential.source.kind}: a token minted per call is for tool "
                "credentials; an McpServer's connections do not carry one yet"
            )
        inject = credential.inject
        if inject.file is not None or inject.methods is not None or inject.paths is not None:
            problems.append(
                f"{where}.inject: a server's credential takes no file, methods or paths"
            )
        for entry in inject.hosts or []:
            if entry not in targets:
                problems.append(
                    f"{where}.inject.hosts: {entry!r} is not the server's host ({host})"
                )
    return problems


def internal_literal(url: str) -> str | None:
    """Why an issuer's URL may not be used (None: it may): it names a loopback, private,
    link-local or unspecified address literally (an IPv4 address inside IPv6 judged as
    itself), spells an address in a form other than the canonical one, names `localhost`,
    or holds a user or password. The operator posts client secrets there, so no tenant may
    point it at an internal service; an internal issuer is named by host name and listed in
    TOOLADAPTER_TRUSTED_ISSUERS (a name is judged on the address it resolves to when a call
    is brokered). The CRD cannot afford this check."""
    parts = urlsplit(url)
    if parts.username is not None or parts.password is not None:
        # Which part is the host then depends on the parser; the operator refuses it too.
        return "holds a user or password: a token endpoint's URL names only its host"
    raw_host = parts.hostname or ""
    if not raw_host.isascii():
        # Resolvers and URL libraries map other spellings (fullwidth digits, ideographic
        # dots, circled letters) onto an address or `localhost`; the name to use is ASCII.
        return (
            f"{raw_host!r} is not an ASCII host name: name the issuer in its ASCII (IDNA xn--) form"
        )
    host = raw_host.rstrip(".").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return f"{host!r} is this machine: name a public issuer, or a trusted one by name"
    try:
        address = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        if _LOOSE_IPV4.match(host):
            return (
                f"{host!r} spells an address in a non-canonical form: name a public issuer "
                "by its host name or its dotted address"
            )
        return None
    if address.is_global and address_kind(address) is None:
        return None
    return (
        f"{host} is not a public address: name a public issuer, or an internal one by its "
        "host name listed in the operator's TOOLADAPTER_TRUSTED_ISSUERS"
    )


def _source_problems(source: CredentialSource, where: str) -> list[str]:
    problems = []
    if source.secret_key_ref is not None:
        ref = source.secret_key_ref
        if not _DNS_SUBDOMAIN.match(ref.name) or len(ref.name) > 253:
            problems.append(f"{where}.source.secretKeyRef.name: {ref.name!r} is not a Secret name")
        if not _SECRET_KEY.match(ref.key) or len(ref.key) > 253:
            problems.append(f"{where}.source.secretKeyRef.key: {ref.key!r} is not a Secret key")
    issued = source.issued
    if issued is not None:
        ref = issued.client_secret_ref
        field = f"{where}.source.{source.kind}.clientSecretRef"
        if not _DNS_SUBDOMAIN.match(ref.name) or len(ref.name) > 253:
            problems.append(f"{field}.name: {ref.name!r} is not a Secret name")
        if not _SECRET_KEY.match(ref.key) or len(ref.key) > 253:
            problems.append(f"{field}.key: {ref.key!r} is not a Secret key")
        for name, url in (("tokenUrl", issued.token_url), ("revocationUrl", issued.revocation_url)):
            problem = internal_literal(url) if url else None
            if problem:
                problems.append(f"{where}.source.{source.kind}.{name}: {problem}")
    if source.service_account_token is not None:
        name = source.service_account_token.service_account_name
        if not _DNS_SUBDOMAIN.match(name):
            problems.append(
                f"{where}.source.serviceAccountToken.serviceAccountName: {name!r} is not a "
                "ServiceAccount name"
            )
    return problems
