"""A real OAuth 2.0 issuer on loopback for the minted-credential tests: the small server of
`hack/oauth/` (zitadel/oidc's op package: client credentials, token exchange, revocation),
built from its pinned Go module, serving TLS with a test CA's certificate.

Its subject tokens (token exchange) are the cluster's ServiceAccount tokens: it checks them
against the API server's keys (`/openid/v1/jwks`), issuer and an audience. `tokens()` lists
every token it issued, and whether it was revoked.
"""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import subprocess
from pathlib import Path
from typing import Any

from tooladapter.devtools.cluster import ROOT
from tooladapter.devtools.groups import stop_group, tail_of
from tooladapter.devtools.host import free_port
from tooladapter.devtools.tls import TestCertificates
from tooladapter.devtools.waiting import wait_for

HACK = ROOT / "hack" / "oauth"


def build() -> Path:
    """The cached server binary, built first if needed (`make oauth-server` builds it
    ahead)."""
    out = subprocess.run(
        [str(HACK / "build.sh")], check=True, capture_output=True, text=True, timeout=3600
    )
    return Path(out.stdout.strip().splitlines()[-1])


class OAuthServer:
    """The issuer in its own process group on a free loopback port, known by `host`
    (a name the test CA's certificate holds, mapped to loopback by the tests)."""

    def __init__(
        self,
        workdir: Path,
        host: str,
        certs: TestCertificates,
        clients: list[dict[str, Any]],
        subject: tuple[str, str, str] | None = None,
        address: str = "127.0.0.1",
    ) -> None:
        """`subject`: (JWKS document, issuer, audience) of the subject tokens it accepts;
        `address`: where it listens (the node's address, for a proxy in the cluster)."""
        self.address = address
        self.workdir = workdir
        self.host = host
        self.certs = certs
        self.clients = clients
        self.subject = subject
        self.port = free_port(address)
        self.base = f"https://{host}:{self.port}"
        self.log_path = workdir / "oauth-server.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def token_url(self) -> str:
        return f"{self.base}/oauth/token"

    @property
    def revocation_url(self) -> str:
        return f"{self.base}/revoke"

    def start(self, timeout: float = 60) -> None:
        binary = build()
        clients = self.workdir / "clients.json"
        clients.write_text(json.dumps(self.clients))
        args = [
            str(binary),
            f"--addr={self.address}:{self.port}",
            f"--issuer={self.base}",
            f"--tls-cert={self.certs.cert}",
            f"--tls-key={self.certs.key}",
            f"--clients={clients}",
        ]
        if self.subject is not None:
            jwks, issuer, audience = self.subject
            keys = self.workdir / "jwks.json"
            keys.write_text(jwks)
            args += [
                f"--subject-jwks={keys}",
                f"--subject-issuer={issuer}",
                f"--subject-audience={audience}",
            ]
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )

        def listening() -> str | None:
            if self.proc is not None and self.proc.poll() is not None:
                return "exited"
            with socket.socket() as s:
                s.settimeout(1)
                return "ready" if s.connect_ex((self.address, self.port)) == 0 else None

        if wait_for(listening, timeout=timeout, what=f"the OAuth server at {self.base}") != (
            "ready"
        ):
            raise AssertionError(f"the OAuth server exited:\n{self.tail()}")

    def tokens(self) -> list[dict[str, Any]]:
        """Every token issued so far: id (the JWT's jti), clientId, subject, audience,
        scopes, grant, expires, revoked."""
        context = ssl.create_default_context(cafile=str(self.certs.ca))
        # The certificate names `host`, which only the operator's resolver maps: connect to
        # its address and verify the certificate against that name.
        raw = socket.create_connection((self.address, self.port), timeout=10)
        conn = http.client.HTTPSConnection(self.host, self.port, context=context, timeout=10)
        conn.sock = context.wrap_socket(raw, server_hostname=self.host)
        try:
            conn.request("GET", "/test/tokens")
            response = conn.getresponse()
            if response.status != 200:
                raise AssertionError(f"GET /test/tokens: HTTP {response.status}")
            data: list[dict[str, Any]] = json.loads(response.read())
            return data
        finally:
            conn.close()

    def stop(self) -> None:
        stop_group(self.proc)

    def tail(self, lines: int = 40) -> str:
        return tail_of(self.log_path, lines)
