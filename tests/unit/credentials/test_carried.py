"""A brokered credential's header, redaction forms and record (`credentials.carried`)."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from tooladapter.credentials.carried import (
    Carried,
    header_of,
    header_problem,
    record,
    secret_forms,
)
from tooladapter.model import Credential, CredentialInjection

VALUE = "s3cr3t-value-42"


def injection(**fields: Any) -> CredentialInjection:
    return CredentialInjection.model_validate({"hosts": ["api.example.com"], **fields})


def carried(
    inject: dict[str, Any], *, source: dict[str, Any] | None = None, **extra: Any
) -> Carried:
    declaration = Credential.model_validate(
        {
            "name": "api",
            "source": source or {"secretKeyRef": {"name": "api", "key": "token"}},
            "inject": inject,
        }
    )
    data = base64.b64encode(VALUE.encode()).decode()
    return Carried(declaration, VALUE, data, **extra)


def test_the_header_is_bearer_authorization_by_default() -> None:
    assert header_of(injection(), VALUE) == ("Authorization", f"Bearer {VALUE}")


def test_an_empty_scheme_sends_the_value_alone() -> None:
    assert header_of(injection(scheme=""), VALUE) == ("Authorization", VALUE)


def test_a_custom_header_and_scheme() -> None:
    assert header_of(injection(header="X-Api-Key", scheme="Token"), VALUE) == (
        "X-Api-Key",
        f"Token {VALUE}",
    )


def test_basic_username_sends_basic_base64_of_user_and_value() -> None:
    name, value = header_of(injection(basicUsername="bot"), VALUE)
    assert name == "Authorization"
    assert value == "Basic " + base64.b64encode(f"bot:{VALUE}".encode()).decode()
    assert VALUE not in value
    # An empty user name is still `:value`.
    assert (
        header_of(injection(basicUsername=""), "v")[1]
        == "Basic " + base64.b64encode(b":v").decode()
    )


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("", "is empty"),
        ("a\r\nX-Injected: 1", "is not a one-line header value"),
        ("a\nb", "is not a one-line header value"),
        ("a\0b", "is not a one-line header value"),
        ("ok value", None),
    ],
)
def test_header_problem(value: str, problem: str | None) -> None:
    assert header_problem(value) == problem


def test_secret_forms_include_the_value_and_the_header_value() -> None:
    basic = carried({"hosts": ["api.example.com"], "basicUsername": "bot"})
    forms = secret_forms(basic)
    assert VALUE in forms
    assert "Basic " + base64.b64encode(f"bot:{VALUE}".encode()).decode() in forms
    assert secret_forms(carried({"hosts": ["api.example.com"]})) == [VALUE, f"Bearer {VALUE}"]


def test_a_file_has_only_its_value_as_a_form() -> None:
    assert secret_forms(carried({"file": "/tooladapter/credentials/api"})) == [VALUE]


def test_the_record_names_where_it_went_never_the_value() -> None:
    sent = carried({"hosts": ["api.example.com"], "basicUsername": "bot"})
    assert record(sent) == {"name": "api", "source": "secretKeyRef", "hosts": ["api.example.com"]}
    token = carried(
        {"file": "/tooladapter/credentials/token"},
        source={"serviceAccountToken": {"serviceAccountName": "deployer"}},
        expires_at="2026-12-06T14:00:00Z",
    )
    assert record(token) == {
        "name": "api",
        "source": "serviceAccountToken",
        "file": "/tooladapter/credentials/token",
        "expiresAt": "2026-12-06T14:00:00Z",
    }
    for item in (sent, token):
        text = json.dumps(record(item))
        for form in [*secret_forms(item), item.data_b64]:
            assert form not in text


def test_a_file_credential_has_its_lease_secret_key() -> None:
    assert carried({"file": "/tooladapter/credentials/api"}).file_key == "file-api"
