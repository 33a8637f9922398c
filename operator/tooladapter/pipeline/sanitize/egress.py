"""What an agent reads of its sandbox's refused connections, beside the tool's output.

The proxy's records (`status.egress`) name hosts and reasons partly chosen by the sandbox
(the host it asked for, the SNI it sent), so before they join the result they are treated
like a tool's output: every brokered value and known secret format redacted, every
character that does not print shown as `\\uXXXX` (no line break, bidirectional control or
zero-width character can reshape what the agent reads), each bounded. A "host" that is no
host name (the proxy records the raw request target of a request it could not parse: any
text without spaces) is not carried at all, here or quoted in its reason: it would put the
sandbox's words into tooladapter's own block. Only refusals are carried: the allowed
connections are the tool's business, and stay in `status.egress`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Final

from tooladapter.egress.core.hosts import host_name_problem, is_ip
from tooladapter.enums import EgressVerdict
from tooladapter.model import EgressRecord, EgressRefusal, EgressUse
from tooladapter.pipeline.sanitize.redaction import bounded_message

#: A host name is at most 253 characters; a reason a few hundred.
MAX_HOST_CHARS: Final = 260
MAX_REASON_CHARS: Final = 400


def printable(text: str) -> str:
    """`text` with every character that does not print as itself (controls, line and
    paragraph separators, format characters such as bidirectional controls) as `\\uXXXX`."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else f"\\u{ord(c):04x}" for c in text)


def refusals(rows: Iterable[EgressUse], secrets: Sequence[str] = ()) -> list[EgressRefusal]:
    """The refused rows of a lease's egress (`egress.core.tally.uses`, already bounded by
    host), redacted and bounded, in their order."""
    out: list[EgressRefusal] = []
    for row in rows:
        if row.verdict == EgressVerdict.ALLOWED:
            continue
        host, reason = row.host, row.reason
        if host and not is_host(host):
            shown = not_a_host(host)
            host, reason = shown, reason.replace(host, shown)
        out.append(
            EgressRefusal(
                host=_clean(host, secrets, MAX_HOST_CHARS),
                port=row.port,
                verdict=row.verdict,
                reason=_clean(reason, secrets, MAX_REASON_CHARS),
                connections=row.connections,
            )
        )
    return out


def is_host(host: str) -> bool:
    """A host name (RFC 1123) or an IP literal, as a sandbox may ask for one."""
    return is_ip(host.strip("[]")) or host_name_problem(host.lower()) is None


def not_a_host(host: str) -> str:
    """What stands for a raw target that is no host name: its length only."""
    return f"(not a host name: {len(host)} characters)"


def redacted_records(records: Iterable[EgressRecord], secrets: Sequence[str]) -> list[EgressRecord]:
    """The proxy's records with every brokered value and known secret format redacted from
    the host and reason, which the sandbox chose: a tool holding a credential could spell
    it as a host name, and the records reach status, the receipt and the artifact store."""
    if not secrets:
        return list(records)
    return [
        record.model_copy(
            update={
                "host": _clean(record.host, secrets, MAX_HOST_CHARS),
                "reason": _clean(record.reason, secrets, MAX_REASON_CHARS),
            }
        )
        for record in records
    ]


def _clean(text: str, secrets: Sequence[str], max_chars: int) -> str:
    """Redacted (whole text, as a message), then made printable, then bounded: the cut
    comes after redaction, so it never leaves part of a secret."""
    shown = printable(bounded_message(text, secrets, max_chars=max_chars))
    return shown if len(shown) <= max_chars else shown[: max_chars - 1] + "…"


def refusal_line(refusal: EgressRefusal) -> str:
    """One refusal as a line: `github.com:443 upstream-failed: github.com did not resolve
    (1 connection)`; a row of further hosts says so."""
    where = refusal.host or "other hosts"
    if refusal.host and refusal.port is not None:
        where = f"{where}:{refusal.port}"
    count = refusal.connections
    plural = "connection" if count == 1 else "connections"
    why = f": {refusal.reason}" if refusal.reason else ""
    return f"{where} {refusal.verdict}{why} ({count} {plural})"


__all__ = [
    "MAX_HOST_CHARS",
    "MAX_REASON_CHARS",
    "is_host",
    "not_a_host",
    "printable",
    "redacted_records",
    "refusal_line",
    "refusals",
]
