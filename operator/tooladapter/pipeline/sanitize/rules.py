"""Known secret formats, each written from its issuer's public documentation.

GitHub classic and fine-grained, GitLab, Slack, Stripe, OpenAI, Anthropic, Google, npm,
PyPI, AWS, Azure connection strings, SAS signatures, AD client secrets and DevOps PATs,
JWTs including Kubernetes service-account tokens, PEM and PuTTY private keys,
`Authorization:` headers, URL credentials and `password=`/`secret=`/`token:` assignments
in config, env and URLs.

Every pattern runs on RE2 (`linear_regex`): time linear in the text, whatever an agent
makes a tool print (Python's `re`, and the detect-secrets plugins built on it, took ~20 s
on `seq -s // 1 40000`). After each match the work is bounded too: every pattern either
ends in a bounded repetition or consumes the run it matched.
"""

from __future__ import annotations

import base64
import binascii
import bisect
import json
from collections.abc import Callable
from dataclasses import dataclass

from tooladapter.pipeline.linear_regex import LinearPattern, compile_internal, compile_linear

#: No rule matches fewer bytes than this (`://:x@`; a unit test checks every rule).
SHORTEST_MATCH = 6
#: A JWT payload longer than this is not decoded to tell its kind (it is redacted anyway).
_MAX_JWT_PAYLOAD = 16 * 1024


@dataclass(frozen=True)
class Rule:
    """One known secret format: the text a regex matches (or its `group`; -1: the last
    group that took part) is redacted as `kind`. The match must not touch a byte of
    `left`/`right` on that side (RE2 has no look-around)."""

    kind: str
    pattern: str
    group: int = 0
    left: bytes = b""
    right: bytes = b""
    kind_of: Callable[[bytes], str] | None = None
    source: str = ""

    @property
    def compiled(self) -> LinearPattern:
        return compile_linear(self.pattern)


def _jwt_kind(token: bytes) -> str:
    try:
        payload = token.split(b".")[1]
        if len(payload) > _MAX_JWT_PAYLOAD:
            return "jwt"
        claims = json.loads(base64.urlsafe_b64decode(payload + b"=" * (-len(payload) % 4)))
    except (ValueError, IndexError, binascii.Error, RecursionError):
        return "jwt"
    if isinstance(claims, dict):
        subject = str(claims.get("sub", ""))
        issuer = str(claims.get("iss", ""))
        if (
            "kubernetes.io" in claims
            or subject.startswith("system:serviceaccount:")
            or issuer == "kubernetes/serviceaccount"
        ):
            return "kubernetes-service-account-token"
    return "jwt"


_ALNUM = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
_B64 = _ALNUM + b"+/="
_TOKEN_CHARS = _ALNUM + b"_-"
#: A value after `key=` / `key: `: quoted (JSON escapes allowed) or up to a delimiter.
_VALUE = (
    r"""(?:"((?:[^"\\\r\n]|\\.)+)"|'([^'\r\n]+)'"""
    r"""|([^\s"'`&;,<>(){}\[\]]+))"""
)
#: `key=value`, `key: value`, `"key": "value"`, `key := value`, `key => value`.
_ASSIGN = r"""["']?[ \t]{0,16}(?::=|=>|[:=])[ \t]{0,16}"""

#: The known formats, most specific first: where matches overlap, the first rule names it.
RULES: tuple[Rule, ...] = (
    Rule(
        "private-key",
        r"-----BEGIN [A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----(?s:.*?)"
        r"(?:-----END [A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----|\z)",
        source="RFC 7468 (PEM); OpenSSH, PGP and PKCS#8 blocks; cut-off blocks to the end",
    ),
    Rule(
        "private-key",
        r"PuTTY-User-Key-File-\d{1,3}:(?s:.*?)(?:Private-MAC:[ \t]*[0-9a-fA-F]*|\z)",
        source="PuTTY .ppk format",
    ),
    Rule(
        "jwt",
        r"eyJ[A-Za-z0-9_-]{4,}\.eyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*",
        left=_TOKEN_CHARS,
        kind_of=_jwt_kind,
        source="RFC 7519 compact JWS (Kubernetes service-account tokens named as such)",
    ),
    Rule(
        "github-token",
        r"gh[pousr]_[A-Za-z0-9_]{36,}",
        left=_TOKEN_CHARS,
        source="GitHub: ghp_ (classic PAT), gho_, ghu_, ghs_, ghr_ + 36 base62 characters",
    ),
    Rule(
        "github-token",
        r"github_pat_[A-Za-z0-9_]{22,}",
        left=_TOKEN_CHARS,
        source="GitHub fine-grained PAT: github_pat_ + 22 + _ + 59 characters",
    ),
    Rule(
        "gitlab-token",
        r"(?:glpat|gloas|gldt|glrt|glrtr|glcbt|glptt|glft|glimt|glagent|glsoat|glffct|glwt)"
        r"-[A-Za-z0-9_.-]{20,}",
        left=_TOKEN_CHARS,
        source="GitLab token prefixes (docs.gitlab.com security/tokens)",
    ),
    Rule(
        "gitlab-token",
        r"GR1348941[A-Za-z0-9_-]{20,}",
        left=_TOKEN_CHARS,
        source="GitLab runner registration token",
    ),
    Rule(
        "slack-token",
        r"(?:xox[abposre]|xoxe\.xox[bp]|xapp)-[A-Za-z0-9-]{10,}",
        left=_TOKEN_CHARS,
        source="Slack bot/user/app/config/refresh tokens (api.slack.com/authentication)",
    ),
    Rule(
        "slack-webhook",
        r"hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9_/-]{10,}",
        source="Slack incoming webhook and workflow URLs",
    ),
    Rule(
        "stripe-access-key",
        r"(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{10,}",
        left=_TOKEN_CHARS,
        source="Stripe secret (sk_) and restricted (rk_) keys",
    ),
    Rule(
        "stripe-access-key",
        r"whsec_[A-Za-z0-9]{20,}",
        left=_TOKEN_CHARS,
        source="Stripe webhook signing secret",
    ),
    Rule(
        "anthropic-api-key",
        r"sk-ant-(?:api|admin|oat|ort|sid)[0-9]{2}-[A-Za-z0-9_-]{20,}",
        left=_TOKEN_CHARS,
        source="Anthropic API (sk-ant-api03-), Admin (sk-ant-admin01-) and OAuth keys",
    ),
    Rule(
        "openai-token",
        r"sk-(?:proj|svcacct|admin|None)-[A-Za-z0-9_-]{20,}",
        left=_TOKEN_CHARS,
        source="OpenAI project, service-account and admin keys",
    ),
    Rule(
        "openai-token",
        r"sk-[A-Za-z0-9_-]*T3BlbkFJ[A-Za-z0-9_-]{10,}",
        left=_TOKEN_CHARS,
        source="OpenAI keys carrying the T3BlbkFJ marker",
    ),
    Rule(
        "openai-token",
        r"sk-[A-Za-z0-9]{48}",
        left=_TOKEN_CHARS,
        right=_TOKEN_CHARS,
        source="OpenAI legacy user keys: sk- + 48 characters",
    ),
    Rule(
        "google-api-key",
        r"AIza[0-9A-Za-z_-]{35}",
        left=_TOKEN_CHARS,
        source="Google Cloud API keys (AIza + 35 characters)",
    ),
    Rule(
        "google-oauth-secret",
        r"GOCSPX-[A-Za-z0-9_-]{20,}|ya29\.[0-9A-Za-z_-]{20,}|1//0[0-9A-Za-z_-]{30,}",
        left=_TOKEN_CHARS,
        source="Google OAuth client secrets, access and refresh tokens",
    ),
    Rule(
        "npm-tokens",
        r"npm_[A-Za-z0-9]{36}",
        left=_TOKEN_CHARS,
        source="npm access tokens",
    ),
    Rule(
        "npm-tokens",
        r"(?im)(?:^|:)_(?:authToken|auth|password)[ \t]{0,16}=[ \t]{0,16}[\"']?([^\s\"']{6,})",
        group=1,
        source=".npmrc _authToken, _auth and _password",
    ),
    Rule(
        "pypi-token",
        r"pypi-AgE[A-Za-z0-9_-]{50,}",
        left=_TOKEN_CHARS,
        source="PyPI and TestPyPI API tokens (macaroons)",
    ),
    Rule(
        "aws-access-key",
        r"(?:A3T[A-Z0-9]|AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{16}",
        left=_ALNUM,
        right=_ALNUM,
        source="AWS access key ids (AKIA long-term, ASIA temporary)",
    ),
    Rule(
        "aws-secret-access-key",
        r"(?i)secret_?access_?key" + _ASSIGN + r"[\"']?([A-Za-z0-9/+]{40})",
        group=1,
        right=_B64,
        source="AWS secret access keys where named (credentials file, env, STS JSON)",
    ),
    Rule(
        "aws-session-token",
        r"(?i)session_?token" + _ASSIGN + r"[\"']?([A-Za-z0-9/+=]{100,})",
        group=1,
        source="AWS session tokens where named",
    ),
    Rule(
        "azure-connection-string",
        r"(?i)(?:AccountKey|SharedAccessKey|SharedSecretValue)[ \t]{0,16}=[ \t]{0,16}"
        r"([A-Za-z0-9+/]{20,}={0,2})",
        group=1,
        source="Azure Storage, Service Bus, Event Hubs and Cosmos DB connection strings",
    ),
    Rule(
        "azure-sas-signature",
        r"(?i)(?:^|[?&;\s\"'])sig=([A-Za-z0-9%+/=]{20,})",
        group=1,
        source="Azure shared access signatures (sig= of a SAS URL or connection string)",
    ),
    Rule(
        "azure-ad-client-secret",
        r"[A-Za-z0-9_~.]{3}[0-9]Q~[A-Za-z0-9_~.-]{31,34}",
        left=_TOKEN_CHARS + b"~.",
        right=_TOKEN_CHARS + b"~.",
        source="Microsoft Entra ID (Azure AD) application client secrets",
    ),
    Rule(
        "azure-devops-pat",
        r"[a-z2-7]{52}",
        left=_ALNUM,
        right=_ALNUM,
        source="Azure DevOps PATs, legacy 52-character base32 format",
    ),
    Rule(
        "azure-devops-pat",
        r"[A-Za-z0-9]{76}AZDO[A-Za-z0-9]{4}",
        left=_ALNUM,
        right=_ALNUM,
        source="Azure DevOps PATs, 84-character format with AZDO at 76",
    ),
    Rule(
        "discord-bot-token",
        r"[MNO][A-Za-z0-9_-]{23,25}\.[A-Za-z0-9_-]{6}\.[A-Za-z0-9_-]{27,38}",
        left=_TOKEN_CHARS,
        source="Discord bot tokens",
    ),
    Rule(
        "mailchimp-access-key",
        r"[0-9a-f]{32}-us[0-9]{1,2}",
        left=_ALNUM,
        right=_ALNUM,
        source="Mailchimp API keys",
    ),
    Rule(
        "sendgrid-api-key",
        r"SG\.[A-Za-z0-9_-]{22}\.[A-Za-z0-9_-]{43}",
        left=_TOKEN_CHARS,
        source="SendGrid API keys",
    ),
    Rule(
        "square-oauth-secret",
        r"sq0csp-[0-9A-Za-z_-]{43}|sq0atp-[0-9A-Za-z_-]{22}|EAAA[A-Za-z0-9_-]{60}",
        left=_TOKEN_CHARS,
        source="Square OAuth secrets and access tokens",
    ),
    Rule(
        "telegram-bot-token",
        r"[0-9]{8,10}:[0-9A-Za-z_-]{35}",
        left=_ALNUM,
        right=_TOKEN_CHARS,
        source="Telegram bot tokens",
    ),
    Rule(
        "twilio-api-key",
        r"(?:SK|AC)[0-9a-f]{32}",
        left=_ALNUM,
        right=_ALNUM,
        source="Twilio API key and account SIDs",
    ),
    Rule(
        "authorization-header",
        r"(?i)authorization[\"']?[ \t]{0,16}[:=][ \t]{0,16}[\"']?"
        r"(?:bearer|basic|token|bot|digest|negotiate|apikey|sso-key)[ \t]{1,16}"
        r"([A-Za-z0-9._~+/=-]{8,})",
        group=1,
        source="HTTP Authorization and Proxy-Authorization header values",
    ),
    Rule(
        "basic-auth-credentials",
        r"://[^\s/?#@:]*:([^\s/?#@]+)@",
        group=1,
        source="credentials in URLs (RFC 3986 userinfo)",
    ),
    Rule(
        "secret-assignment",
        r"(?i)(?:password|passwd|passphrase|secret|token|api[_-]?key|access[_-]?key"
        r"|private[_-]?key|credentials?)" + _ASSIGN + _VALUE,
        group=-1,
        source="password=, secret:, token=, api_key: ... in config, env, JSON, YAML and URLs",
    ),
)


#: Whether any rule matches at all: one pass instead of one per rule, for short texts (the
#: many small strings of structured content, messages). Long texts run rule by rule: one
#: automaton for every rule would outgrow RE2's DFA budget and fall back to its slower NFA.
_ANY_RULE = compile_internal("|".join(f"(?:{rule.pattern})" for rule in RULES))
_PREFILTER_BELOW = 4096


def rule_spans(data: bytes, spans: list[tuple[int, int, int, str]]) -> None:
    """Add `(start, end, priority, kind)` to `spans` for every match of a rule in `data`
    (priority: the rule's place in `RULES`, so the most specific names an overlap)."""
    if len(data) < _PREFILTER_BELOW and _ANY_RULE.search(data) is None:
        return
    for priority, rule in enumerate(RULES):
        regex = rule.compiled
        for match in regex.finditer(data):
            index = rule.group
            if index < 0:
                index = max(
                    (i for i in range(1, regex.groups + 1) if match.span(i)[0] >= 0), default=0
                )
            start, end = match.span(index)
            if end <= start:
                continue
            if rule.left and start > 0 and data[start - 1] in rule.left:
                continue
            if rule.right and end < len(data) and data[end] in rule.right:
                continue
            kind = rule.kind_of(data[start:end]) if rule.kind_of else rule.kind
            spans.append((start, end, priority, kind))


def pattern_spans(text: str) -> list[tuple[int, int, str]]:
    """Where `text` holds something shaped like a known secret: `(start, end, kind)` in
    characters of `text`, by start. For views that flag a token and hide nothing (the
    review views, pipeline/shown: an agent's own arguments are what a reviewer approves)."""
    data = text.encode("utf-8", errors="surrogatepass")
    found: list[tuple[int, int, int, str]] = []
    rule_spans(data, found)
    if not found:
        return []
    # Byte offsets to character offsets: a character starts at every byte that is no UTF-8
    # continuation byte (a match that ends inside a character ends after it).
    leads = [i for i, byte in enumerate(data) if byte & 0xC0 != 0x80]
    return [
        (bisect.bisect_left(leads, start), bisect.bisect_left(leads, end), kind)
        for start, end, _priority, kind in sorted(found, key=lambda s: (s[0], s[2], -s[1]))
    ]
