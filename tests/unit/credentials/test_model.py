"""`spec.credentials` as the model reads it: each malformed entry is refused with a message
naming the field (the CRD's CEL says the same at apply: `tests/unit/packaging/test_crds.py`)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from tooladapter.model import Credential, McpServerSpec

SECRET = {"secretKeyRef": {"name": "api", "key": "token"}}
TOKEN = {"serviceAccountToken": {"serviceAccountName": "deployer"}}
HOSTS = {"hosts": ["api.example.com"]}


def parse(source: Any = None, inject: Any = None, name: str = "api") -> Credential:
    return Credential.model_validate(
        {
            "name": name,
            "source": SECRET if source is None else source,
            "inject": HOSTS if inject is None else inject,
        }
    )


def refused(needle: str, **entry: Any) -> str:
    with pytest.raises(ValidationError) as caught:
        parse(**entry)
    text = str(caught.value)
    assert needle in text, text
    return text


def test_a_well_formed_entry_reads_with_its_defaults() -> None:
    credential = parse()
    assert credential.source.kind == "secretKeyRef"
    assert credential.inject.effective_header == "Authorization"
    assert credential.inject.effective_scheme == "Bearer"
    assert parse(source=TOKEN).source.kind == "serviceAccountToken"
    assert parse(inject={"hosts": ["a.example.com"], "scheme": ""}).inject.effective_scheme == ""
    file = parse(inject={"file": "/tooladapter/credentials/db/.pass"})
    assert file.inject.file == "/tooladapter/credentials/db/.pass" and file.inject.hosts is None


def test_a_source_must_be_given() -> None:
    refused("source: set exactly one of secretKeyRef, serviceAccountToken", source={})


def test_two_sources_are_refused() -> None:
    refused("source: set exactly one of secretKeyRef, serviceAccountToken", source=SECRET | TOKEN)


def test_both_injection_forms_are_refused() -> None:
    refused(
        "inject: set exactly one of hosts, file",
        inject={"hosts": ["api.example.com"], "file": "/tooladapter/credentials/x"},
    )


def test_an_injection_must_be_given() -> None:
    refused("inject: set exactly one of hosts, file", inject={})


def test_basic_username_may_not_hold_a_colon() -> None:
    text = refused("basicUsername", inject={"hosts": ["api.example.com"], "basicUsername": "a:b"})
    assert "pattern" in text


def test_basic_username_takes_no_scheme() -> None:
    refused(
        "inject.scheme: basicUsername",
        inject={"hosts": ["api.example.com"], "basicUsername": "bot", "scheme": "Token"},
    )


@pytest.mark.parametrize(
    "path",
    [
        "/etc/passwd",
        "/tooladapter/credentials",
        "/tooladapter/credentials/",
        "/tooladapter/credentials/../arguments.json",
        "/tooladapter/credentials/a/../../x",
        "/tooladapter/credentials/./x",
        "/tooladapter/credentialsx",
        "tooladapter/credentials/x",
        "/tooladapter/credentials/a b",
    ],
)
def test_a_file_outside_the_mount_root_or_with_dot_segments_is_refused(path: str) -> None:
    refused("inject.file", inject={"file": path})


@pytest.mark.parametrize(
    "field",
    [
        {"header": "X-Key"},
        {"scheme": "Token"},
        {"basicUsername": "bot"},
        {"methods": ["GET"]},
        {"paths": ["/v1/"]},
    ],
)
def test_http_fields_are_refused_with_a_file(field: dict[str, Any]) -> None:
    refused(
        "header, scheme, basicUsername, methods and paths are for HTTP injection",
        inject={"file": "/tooladapter/credentials/x", **field},
    )


@pytest.mark.parametrize(
    ("inject", "needle"),
    [
        ({"hosts": []}, "inject.hosts"),
        ({"hosts": ["API.example.com"]}, "inject.hosts.0"),
        ({"hosts": ["https://api.example.com"]}, "inject.hosts.0"),
        ({"hosts": ["api.example.com"], "header": "X Key"}, "inject.header"),
        ({"hosts": ["api.example.com"], "scheme": "a\r\nb"}, "inject.scheme"),
        ({"hosts": ["api.example.com"], "methods": ["TRACE"]}, "inject.methods.0"),
        ({"hosts": ["api.example.com"], "paths": ["v1/"]}, "inject.paths.0"),
        ({"hosts": ["api.example.com"], "paths": ["/v1/?a=b"]}, "inject.paths.0"),
    ],
)
def test_malformed_http_fields_are_refused_by_name(inject: dict[str, Any], needle: str) -> None:
    refused(needle, inject=inject)


def test_a_name_is_a_dns_label() -> None:
    refused("name", name="Api_Key")


def test_a_server_declares_a_list_of_the_same_entries() -> None:
    spec = McpServerSpec.model_validate(
        {
            "url": "https://mcp.example.com/mcp",
            "credentials": [{"name": "api", "source": SECRET, "inject": HOSTS}],
        }
    )
    assert [c.name for c in spec.credentials] == ["api"]
    with pytest.raises(ValidationError, match="credentials"):
        # The single object of before is gone, with no alias.
        McpServerSpec.model_validate(
            {"url": "https://mcp.example.com/mcp", "credentials": {"secretKeyRef": SECRET}}
        )
