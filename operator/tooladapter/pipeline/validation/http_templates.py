"""HTTP templates of http tools: checked when a descriptor is applied, rendered per call.

`render_http_request` is the only place where arguments meet an HTTP request: values are
URL-encoded in the URL, JSON-escaped in JSON bodies, form-encoded in forms, refused when
they would split a header, and the resulting host must be one the descriptor allows.
`check_http` refuses, at apply, templates that could not render safely: placeholders that
are not arguments, a placeholder in the Content-Type, hosts outside `allowedHosts`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple
from urllib.parse import quote, quote_plus, urlsplit

from tooladapter.credentials.carried import HEADER_CONTROL
from tooladapter.egress.core.hosts import host_name_problem, is_ip
from tooladapter.model import HttpSpec

#: An HTTP header name (RFC 9110 token): literal in templates and credentials alike.
HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


def placeholders(template: str) -> list[str]:
    """The `{name}` placeholders of a template, in order of appearance."""
    return PLACEHOLDER.findall(template)


def check_http(http: HttpSpec, declared_names: set[str] | None) -> list[str]:
    """Problems of an http block at apply; `declared_names` are the input schema's
    properties (None when it declares none: placeholders are then not checked)."""
    problems: list[str] = []
    templates: list[tuple[str, str]] = [("http.url", http.url)]
    templates.extend((f"http.headers[{name!r}]", value) for name, value in http.headers.items())
    if http.body is not None:
        templates.append(("http.body", http.body))
    if declared_names is not None:
        for where, template in templates:
            for name in placeholders(template):
                if name not in declared_names:
                    problems.append(
                        f"{where}: placeholder {{{name}}} is not a property of inputSchema "
                        f"(declared: {', '.join(sorted(declared_names)) or 'none'})"
                    )
    for name, value in http.headers.items():
        if not HEADER_NAME.match(name) or PLACEHOLDER.search(name):
            problems.append(f"http.headers: {name!r} is not a valid literal header name")
        if any(ch in value for ch in "\r\n\0"):
            problems.append(f"http.headers[{name!r}]: the value contains CR, LF or NUL")
    if http.body is not None:
        try:
            _body_content_type(http)
        except HttpTemplateError as err:
            problems.append(str(err))

    parts = urlsplit(PLACEHOLDER.sub("x", http.url))
    if parts.scheme not in ("http", "https") or "{" in http.url.split("://", 1)[0]:
        problems.append(f"http.url: scheme must be http or https (got {http.url!r})")
    if "@" in parts.netloc:
        problems.append(
            "http.url: credentials in the URL are not allowed; declare them in "
            "spec.credentials (inject.hosts), which the operator adds as a header"
        )
    host_has_placeholder = template_host_has_placeholder(http.url)
    allowed: list[tuple[str, int | None]] = []
    for index, entry in enumerate(http.allowed_hosts):
        try:
            host, port = _parse_host_port(entry)
        except ValueError as err:
            problems.append(f"http.allowedHosts[{index}]: {err}")
            continue
        problem = host_name_problem(host) if not is_ip(host) else None
        if problem or host.startswith("*."):
            problems.append(
                f"http.allowedHosts[{index}]: {entry!r} "
                f"{problem or 'must name a host exactly (no wildcards)'}"
            )
            continue
        allowed.append((host, port))
    if host_has_placeholder and not http.allowed_hosts:
        problems.append(
            "http.url: the host comes from a placeholder, so http.allowedHosts must list "
            "the hosts it may resolve to"
        )
    if not host_has_placeholder and allowed and parts.hostname:
        if not _host_allowed(parts.hostname, parts.port, parts.scheme, allowed):
            problems.append(
                f"http.url: host {parts.netloc!r} is not in http.allowedHosts "
                f"({', '.join(http.allowed_hosts)})"
            )
    if not host_has_placeholder and not parts.hostname:
        problems.append(f"http.url: {http.url!r} has no host")
    return problems


_DEFAULT_PORTS = {"http": 80, "https": 443}


def _host_allowed(
    host: str, port: int | None, scheme: str, allowed: Sequence[tuple[str, int | None]]
) -> bool:
    """`host` alone allows the scheme's default port only; `host:port` that port only."""
    effective_port = port if port is not None else _DEFAULT_PORTS.get(scheme)
    for allowed_host, allowed_port in allowed:
        if host != allowed_host:
            continue
        if allowed_port is None and effective_port == _DEFAULT_PORTS.get(scheme):
            return True
        if allowed_port is not None and allowed_port == effective_port:
            return True
    return False


def _parse_host_port(entry: str) -> tuple[str, int | None]:
    """`host`, `host:port`, `[v6]` or `[v6]:port` -> (lower-case host, port)."""
    text = entry.strip().lower()
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        port_text = rest[1:] if rest.startswith(":") else ""
    elif text.count(":") == 1:
        host, _, port_text = text.partition(":")
    else:
        host, port_text = text, ""
    if port_text:
        if not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
            raise ValueError(f"{entry!r} has an invalid port {port_text!r}")
        return host, int(port_text)
    return host, None


class HttpTemplateError(ValueError):
    """The declared HTTP request cannot be rendered from these arguments."""


#: Form bodies: every placeholder value is encoded as one form field value.
FORM_MEDIA_TYPE = "application/x-www-form-urlencoded"


def _body_content_type(spec: HttpSpec) -> str:
    """The media type of the body, from the descriptor's literal Content-Type header (it
    decides how arguments are encoded into the body, so an argument may not choose it)."""
    declared = next((v for k, v in spec.headers.items() if k.lower() == "content-type"), "")
    if PLACEHOLDER.search(declared):
        raise HttpTemplateError(
            "http.headers['Content-Type']: holds a placeholder, but the Content-Type decides "
            "how arguments are encoded into http.body; declare it literally"
        )
    return declared.split(";", 1)[0].strip().lower()


class RenderedHttpRequest(NamedTuple):
    method: str
    url: str
    headers: dict[str, str]
    body: str | None


def _argument_text(arguments: Mapping[str, Any], name: str, where: str) -> tuple[str, Any]:
    if name not in arguments:
        raise HttpTemplateError(
            f"placeholder {{{name}}} in {where} has no value: the call has no argument {name!r}"
        )
    value = arguments[name]
    if value is None:
        raise HttpTemplateError(f"placeholder {{{name}}} in {where}: argument {name!r} is null")
    text = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
    return text, value


def _fill(
    template: str,
    where: str,
    encode: Callable[[str, str, Any], str],
    arguments: Mapping[str, Any],
) -> str:
    def replace(match: re.Match[str]) -> str:
        text, value = _argument_text(arguments, match.group(1), where)
        return encode(match.group(1), text, value)

    return PLACEHOLDER.sub(replace, template)


def _url_value(name: str, text: str, _value: Any) -> str:
    if text in ("", ".", ".."):
        raise HttpTemplateError(
            f"placeholder {{{name}}} in the URL: argument {name!r} is {text!r}, "
            "which would change the URL's structure"
        )
    return quote(text, safe="")


def render_url(spec: HttpSpec, arguments: Mapping[str, Any]) -> str:
    """The URL of a declared HTTP tool's request, its host checked against `allowedHosts`
    (see `render_http_request`); raises `HttpTemplateError`."""
    url = _fill(spec.url, "the URL", _url_value, arguments)
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise HttpTemplateError(f"the rendered URL must be http or https, got {parts.scheme!r}")
    try:
        port = parts.port
    except ValueError as err:
        raise HttpTemplateError(f"the rendered URL has an invalid port: {err}") from err
    host = parts.hostname or ""
    allowed: list[tuple[str, int | None]] = []
    for entry in spec.allowed_hosts:
        try:
            allowed.append(_parse_host_port(entry))
        except ValueError as err:
            raise HttpTemplateError(f"http.allowedHosts: {err}") from err
    if not allowed:
        template_netloc = spec.url.split("://", 1)[-1].split("/", 1)[0]
        if PLACEHOLDER.search(template_netloc) is None and host:
            allowed.append((host, port))
    if not host or not _host_allowed(host, port, parts.scheme, allowed):
        shown = ", ".join(spec.allowed_hosts) or "none"
        raise HttpTemplateError(
            f"the rendered URL's host {parts.netloc!r} is not an allowed host "
            f"(http.allowedHosts: {shown})"
        )
    return url


def template_host_has_placeholder(url: str) -> bool:
    """Whether the host (or port) of a URL template comes from an argument."""
    netloc = url.split("://", 1)[-1].split("/", 1)[0].split("?", 1)[0]
    return PLACEHOLDER.search(netloc) is not None


def render_http_request(spec: HttpSpec, arguments: Mapping[str, Any]) -> RenderedHttpRequest:
    """The concrete request for a declared HTTP tool; raises `HttpTemplateError`.

    - URL: each `{name}` is replaced by the argument, percent-encoded with no safe
      characters (`/`, `?`, `#`, `@` and `:` are encoded too), so an argument can never
      change the host, path structure or query layout; `.` and `..` are refused.
    - Headers: plain text; a value that would contain CR, LF or NUL is refused.
    - Body, by the descriptor's literal Content-Type: JSON-escaped (without quotes) for
      JSON, and the rendered body must parse as JSON; for a form
      (`application/x-www-form-urlencoded`) each value is form-encoded (`quote_plus`: `&`,
      `=` and `+` cannot add or split fields); otherwise plain text. Non-string arguments
      are written as compact JSON.
    - The host of the rendered URL must be in `allowedHosts` (or, when that is empty,
      be the literal host of the URL template).
    Placeholders are filled in one pass: a value containing `{x}` is not expanded again.
    """

    def fill(template: str, where: str, encode: Callable[[str, str, Any], str]) -> str:
        return _fill(template, where, encode, arguments)

    url = render_url(spec, arguments)

    headers: dict[str, str] = {}
    for name, template in spec.headers.items():

        def header_value(placeholder: str, text: str, _value: Any, header: str = name) -> str:
            if any(ch in text for ch in "\r\n\0"):
                raise HttpTemplateError(
                    f"placeholder {{{placeholder}}} in header {header!r}: the argument "
                    "contains CR, LF or NUL, which would split the header"
                )
            if HEADER_CONTROL.search(text):
                # Refused here, before anything is sent: aiohttp refuses it only while
                # sending, an error that would settle the call Uncertain.
                raise HttpTemplateError(
                    f"placeholder {{{placeholder}}} in header {header!r}: the argument "
                    "contains a control character, which no header value may hold"
                )
            return text

        headers[name] = fill(template, f"header {name!r}", header_value)

    body: str | None = None
    if spec.body is not None:
        content_type = _body_content_type(spec)
        if "json" in content_type:

            def json_value(_name: str, _text: str, value: Any) -> str:
                if isinstance(value, str):
                    return json.dumps(value, ensure_ascii=False)[1:-1]
                return json.dumps(value, separators=(",", ":"), ensure_ascii=False)

            body = fill(spec.body, "the body", json_value)
            try:
                json.loads(body)
            except ValueError as err:
                raise HttpTemplateError(
                    f"the rendered JSON body is not valid JSON ({err}); check the quoting "
                    "around placeholders in http.body"
                ) from err
        elif content_type == FORM_MEDIA_TYPE:
            body = fill(spec.body, "the body", lambda _n, text, _v: quote_plus(text))
        else:
            body = fill(spec.body, "the body", lambda _n, text, _v: text)
    return RenderedHttpRequest(method=spec.method, url=url, headers=headers, body=body)
