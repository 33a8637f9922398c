"""Schema validation, bounds, descriptor consistency and HTTP request rendering."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs

import pytest

from tooladapter.egress.core.hosts import parse_egress_entry
from tooladapter.enums import SideEffectClass, ToolKind
from tooladapter.model import (
    Credential,
    Egress,
    HttpSpec,
    McpBinding,
    NativeSpec,
    SandboxSpec,
    ShellSpec,
    ToolDescriptorSpec,
)
from tooladapter.pipeline.validation.arguments import check_bounds, validate_arguments
from tooladapter.pipeline.validation.descriptor import check_descriptor
from tooladapter.pipeline.validation.http_templates import HttpTemplateError, render_http_request
from tooladapter.pipeline.validation.paths import json_path
from tooladapter.pipeline.validation.schemas import check_schema

FILES_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "files": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"name": {"type": "string", "minLength": 1}},
                "required": ["name"],
            },
        },
        "mode": {"enum": ["fast", "safe"]},
    },
    "required": ["files"],
    "additionalProperties": False,
}


# --------------------------------------------------------------------------- bounds


def test_bounds_accept_ordinary_arguments() -> None:
    assert check_bounds({"files": [{"name": "a"}], "n": 1.5, "ok": True, "none": None}) == []


def test_bounds_refuse_deep_nesting_without_recursion_and_name_the_path() -> None:
    value: Any = "leaf"
    for _ in range(5000):  # far deeper than Python's recursion limit
        value = {"a": value}
    problems = check_bounds(value, max_depth=32)
    assert len(problems) == 1
    assert "deeper than 32 levels" in problems[0]
    assert "$.a.a.a" in problems[0]


def test_bounds_refuse_values_larger_than_the_limit() -> None:
    problems = check_bounds({"blob": "x" * 300_000})
    assert problems and "larger than 262144 bytes" in problems[0]


def test_bounds_count_the_compact_json_size_exactly() -> None:
    value = {"a": [1, "é"]}  # {"a":[1,"é"]} = 14 bytes in UTF-8
    assert check_bounds(value, max_bytes=14) == []
    assert check_bounds(value, max_bytes=13) != []


def test_bounds_check_raw_json_text_before_it_is_parsed() -> None:
    assert check_bounds('{"a": "[[[[["}', max_depth=2) == []
    assert "deeper than 2" in check_bounds(b"[[[1]]]", max_depth=2)[0]
    assert "larger than the limit" in check_bounds(b"1" * 20, max_bytes=10)[0]


@pytest.mark.parametrize(
    ("value", "needle"),
    [
        ({"x": float("nan")}, "JSON cannot carry"),
        ({"x": {1, 2}}, "not JSON"),
        ({1: "x"}, "non-string key"),
    ],
)
def test_bounds_report_values_json_cannot_carry(value: Any, needle: str) -> None:
    assert needle in check_bounds(value)[0]


# --------------------------------------------------------------------------- arguments


def test_valid_arguments_have_no_problems() -> None:
    assert validate_arguments(FILES_SCHEMA, {"files": [{"name": "a"}], "mode": "fast"}) == []


def test_every_schema_error_is_reported_with_its_json_path_sorted() -> None:
    problems = validate_arguments(
        FILES_SCHEMA, {"files": [{"name": "a"}, {}, {"name": ""}], "mode": "x", "extra": 1}
    )
    assert [(p.path, p.rule) for p in problems] == [
        ("$", "additionalProperties"),
        ("$.files[1]", "required"),
        ("$.files[2].name", "minLength"),
        ("$.mode", "enum"),
    ]
    assert "'name' is a required property" in problems[1].message
    assert problems[2].schema_path == "#/properties/files/items/properties/name/minLength"
    assert str(problems[1]).startswith("$.files[1]: ")


def test_json_paths_quote_keys_that_are_not_identifiers() -> None:
    assert json_path(["files", 2, "name"]) == "$.files[2].name"
    assert json_path(["a b", 0, "x.y"]) == '$["a b"][0]["x.y"]'


def test_local_refs_resolve() -> None:
    schema = {
        "$defs": {"name": {"type": "string"}},
        "type": "object",
        "properties": {"n": {"$ref": "#/$defs/name"}},
    }
    assert validate_arguments(schema, {"n": "ok"}) == []
    assert [p.path for p in validate_arguments(schema, {"n": 1})] == ["$.n"]


@pytest.mark.parametrize(
    "ref",
    ["https://example.com/schema.json", "http://169.254.169.254/latest", "other.json"],
)
def test_remote_refs_are_never_fetched(ref: str) -> None:
    schema = {"$id": "https://tools.example/s", "properties": {"a": {"$ref": ref}}}
    problems = validate_arguments(schema, {"a": 1})
    assert len(problems) == 1
    assert problems[0].rule == "$ref"
    assert "never fetched" in problems[0].message


def test_formats_are_asserted() -> None:
    schema = {"properties": {"when": {"type": "string", "format": "date"}}}
    assert [p.rule for p in validate_arguments(schema, {"when": "yesterday"})] == ["format"]


def test_problem_list_is_bounded() -> None:
    schema = {"type": "array", "items": {"type": "string"}}
    problems = validate_arguments(schema, list(range(200)), max_problems=10)
    assert len(problems) == 11
    assert problems[-1].rule == "max-problems"
    assert "190 more" in problems[-1].message


def test_a_schema_that_cannot_be_applied_denies_instead_of_crashing() -> None:
    problems = validate_arguments({"type": "string", "pattern": "("}, "x")
    assert [p.rule for p in problems] == ["schema"]


# --------------------------------------------------------------------------- schemas


def test_a_good_schema_has_no_problems() -> None:
    assert check_schema(FILES_SCHEMA) == []
    assert check_schema(True) == []


def test_a_schema_failing_the_metaschema_names_the_location() -> None:
    problems = check_schema({"type": "object", "properties": {"a": {"type": "strin"}}})
    assert problems and "$.properties.a.type" in problems[0]


def test_a_schema_with_an_unresolvable_or_remote_ref_is_invalid() -> None:
    problems = check_schema(
        {"properties": {"a": {"$ref": "#/$defs/missing"}, "b": {"$ref": "https://x.test/s"}}}
    )
    assert any("'#/$defs/missing' does not resolve" in p for p in problems)
    assert any("never fetched" in p for p in problems)


def test_a_schema_with_a_broken_regex_is_invalid() -> None:
    problems = check_schema({"patternProperties": {"([": {}}})
    assert problems and "does not compile" in problems[0]


def test_only_draft_2020_12_is_accepted() -> None:
    problems = check_schema({"$schema": "http://json-schema.org/draft-07/schema#"})
    assert problems and "2020-12" in problems[0]


# --------------------------------------------------------------------------- descriptors


def descriptor(**overrides: Any) -> ToolDescriptorSpec:
    fields: dict[str, Any] = {
        "tool_id": "tool",
        "version": "1.0.0",
        "kind": ToolKind.SHELL,
        "side_effect_class": SideEffectClass.SANDBOX,
    }
    fields.update(overrides)
    return ToolDescriptorSpec(**fields)


def test_a_shell_descriptor_with_defaults_is_valid() -> None:
    assert check_descriptor(descriptor()) == []


def test_a_descriptor_whose_schema_does_not_compile_is_invalid() -> None:
    problems = check_descriptor(descriptor(input_schema={"type": 12}))
    assert problems and problems[0].startswith("inputSchema at $.type")
    problems = check_descriptor(descriptor(output_schema={"required": "x"}))
    assert problems and problems[0].startswith("outputSchema")


def test_input_schema_must_describe_an_object() -> None:
    assert any(
        "always a JSON object" in p
        for p in check_descriptor(descriptor(input_schema={"type": "array"}))
    )


def test_a_container_tool_needs_a_command() -> None:
    problems = check_descriptor(descriptor(kind=ToolKind.CONTAINER))
    assert problems and "sandbox.command" in problems[0]
    ok = descriptor(kind=ToolKind.CONTAINER, sandbox=SandboxSpec(command=["/bin/tool"]))
    assert check_descriptor(ok) == []


def test_a_shell_tool_schema_must_offer_a_string_command() -> None:
    schema = {"type": "object", "properties": {"cmd": {"type": "string"}}}
    assert any("no 'command'" in p for p in check_descriptor(descriptor(input_schema=schema)))
    schema = {"type": "object", "properties": {"command": {"type": "array"}}}
    assert any("must be a string" in p for p in check_descriptor(descriptor(input_schema=schema)))


@pytest.mark.parametrize(
    ("kind", "block"),
    [(ToolKind.HTTP, "http"), (ToolKind.MCP, "mcp"), (ToolKind.NATIVE, "native")],
)
def test_a_kind_without_its_block_is_invalid(kind: ToolKind, block: str) -> None:
    problems = check_descriptor(descriptor(kind=kind))
    assert any(p.startswith(f"{block}:") for p in problems)


def test_a_block_for_another_kind_is_a_problem() -> None:
    problems = check_descriptor(descriptor(http=HttpSpec(url="https://api.example.com/")))
    assert any("http block does not apply to a shell tool" in p for p in problems)
    native = descriptor(
        kind=ToolKind.NATIVE,
        native=NativeSpec(name="list-tools"),
        shell=ShellSpec(),
        mcp=McpBinding(server="s", tool="t", pinned_digest="sha256:" + "0" * 64),
    )
    problems = check_descriptor(native)
    assert len(problems) == 2


@pytest.mark.parametrize(
    "entry",
    ["10.0.0.0/8", "fd00::/8", "github.com", "*.github.com", "proxy:3128", "API.Example.com"],
)
def test_valid_egress_entries_parse(entry: str) -> None:
    assert parse_egress_entry(entry).kind in ("cidr", "host")


@pytest.mark.parametrize(
    ("entry", "needle"),
    [
        ("10.0.0.1/8", "did you mean 10.0.0.0/8"),
        ("0.0.0.0/0", "allows every address"),
        ("10.1.2.3", "bare IP address"),
        ("*", "wildcard"),
        ("*.com", "top-level domain"),
        ("api.*.example.com", "wildcard"),
        ("exa mple.com", "not a valid host name"),
        ("-bad.example.com", "not a valid host name"),
        ("host:99999", "invalid port"),
        ("", "empty"),
    ],
)
def test_invalid_egress_entries_are_reported(entry: str, needle: str) -> None:
    problems = check_descriptor(descriptor(sandbox=SandboxSpec(egress=Egress(allow=[entry]))))
    assert len(problems) == 1
    assert problems[0].startswith("sandbox.egress.allow[0]:")
    assert needle in problems[0]


F1, F2, F3 = (f"/tooladapter/credentials/{n}" for n in ("one", "two", "three"))


def cred(name: str, source: dict[str, Any], inject: dict[str, Any]) -> Credential:
    return Credential.model_validate({"name": name, "source": source, "inject": inject})


def test_credential_secret_names_and_keys_are_checked() -> None:
    allow = SandboxSpec(command=["/bin/tool"], egress=Egress(allow=[]))
    spec = descriptor(
        kind=ToolKind.CONTAINER,
        sandbox=allow,
        credentials=[
            cred("a", {"secretKeyRef": {"name": "Bad_Name", "key": "token"}}, {"file": F1}),
            cred("b", {"secretKeyRef": {"name": "db", "key": "a/b"}}, {"file": F2}),
            cred("c", {"serviceAccountToken": {"serviceAccountName": "No!"}}, {"file": F3}),
        ],
    )
    problems = check_descriptor(spec)
    assert any(p.startswith("credentials[0].source.secretKeyRef.name:") for p in problems)
    assert any(p.startswith("credentials[1].source.secretKeyRef.key:") for p in problems)
    assert any(
        p.startswith("credentials[2].source.serviceAccountToken.serviceAccountName:")
        for p in problems
    )
    assert len(problems) == 3, problems


def test_a_shell_tool_may_carry_no_credential_file() -> None:
    secret = {"secretKeyRef": {"name": "db", "key": "password"}}
    token = {"serviceAccountToken": {"serviceAccountName": "x"}}
    sandbox = SandboxSpec(egress=Egress(allow=["api.example.com"]))
    for source in (secret, token):
        problems = check_descriptor(
            descriptor(sandbox=sandbox, credentials=[cred("c", source, {"file": F1})])
        )
        assert any(
            p.startswith("credentials[0].inject.file: only a container tool") for p in problems
        ), problems
        # Injected into its HTTP requests by the egress proxy, outside the pod: it may.
        hosts = {"hosts": ["api.example.com"]}
        assert (
            check_descriptor(descriptor(sandbox=sandbox, credentials=[cred("c", source, hosts)]))
            == []
        )
    # A container tool runs the platform's fixed argv: it may take files.
    container = descriptor(
        kind=ToolKind.CONTAINER,
        sandbox=SandboxSpec(command=["/bin/tool"], egress=Egress(allow=[])),
        credentials=[cred("s", secret, {"file": F1}), cred("t", token, {"file": F2})],
    )
    assert check_descriptor(container) == []


def test_a_shell_tool_without_an_allow_list_gets_the_default_one() -> None:
    assert ShellSpec().allow is None
    assert ShellSpec(allow=[]).allow == []
    assert check_descriptor(descriptor(shell=ShellSpec(allow=[]))) == []


def test_unparseable_shell_patterns_are_reported() -> None:
    problems = check_descriptor(descriptor(shell=ShellSpec(allow=["git 'status"], block=[" "])))
    assert any("shell.allow[0]" in p for p in problems)
    assert any("shell.block[0]: pattern is empty" in p for p in problems)


# --------------------------------------------------------------------------- http


HTTP_SCHEMA = {
    "type": "object",
    "properties": {"id": {"type": "string"}, "q": {"type": "string"}, "n": {"type": "integer"}},
}


def http_descriptor(http: HttpSpec) -> ToolDescriptorSpec:
    return descriptor(kind=ToolKind.HTTP, http=http, input_schema=HTTP_SCHEMA)


def test_a_consistent_http_descriptor_is_valid() -> None:
    http = HttpSpec(
        method="POST",
        url="https://api.example.com/items/{id}?q={q}",
        headers={"Content-Type": "application/json", "X-Req": "{id}"},
        body='{"n": {n}}',
    )
    assert check_descriptor(http_descriptor(http)) == []


def test_http_placeholders_must_be_declared_arguments() -> None:
    http = HttpSpec(url="https://api.example.com/items/{item}", body="{other}")
    problems = check_descriptor(http_descriptor(http))
    assert any("http.url: placeholder {item}" in p for p in problems)
    assert any("http.body: placeholder {other}" in p for p in problems)


@pytest.mark.parametrize(
    ("http", "needle"),
    [
        (HttpSpec(url="ftp://api.example.com/"), "scheme must be http or https"),
        (HttpSpec(url="{id}://api.example.com/"), "scheme must be http or https"),
        (HttpSpec(url="https://{id}.example.com/"), "allowedHosts must list"),
        (
            HttpSpec(url="https://api.example.com/", allowed_hosts=["other.example.com"]),
            "is not in http.allowedHosts",
        ),
        (HttpSpec(url="https://user:pw@api.example.com/"), "credentials in the URL"),
        (HttpSpec(url="https://api.example.com/", headers={"Bad Header": "x"}), "header name"),
        (HttpSpec(url="https://api.example.com/", allowed_hosts=["*.example.com"]), "exactly"),
    ],
)
def test_http_descriptor_problems(http: HttpSpec, needle: str) -> None:
    assert any(needle in p for p in check_descriptor(http_descriptor(http)))


def test_render_fills_url_placeholders_url_encoded() -> None:
    http = HttpSpec(url="https://api.example.com/items/{id}?q={q}")
    method, url, headers, body = render_http_request(http, {"id": "a/../b?c#d", "q": "x y&z=1"})
    assert method == "GET"
    assert url == "https://api.example.com/items/a%2F..%2Fb%3Fc%23d?q=x%20y%26z%3D1"
    assert headers == {} and body is None


def test_render_json_body_escapes_strings_and_writes_other_values_as_json() -> None:
    http = HttpSpec(
        method="POST",
        url="https://api.example.com/",
        headers={"content-type": "application/json"},
        body='{"q": "{q}", "n": {n}}',
    )
    rendered = render_http_request(http, {"q": 'say "hi"\n', "n": 5})
    assert rendered.body == '{"q": "say \\"hi\\"\\n", "n": 5}'


def test_render_refuses_a_body_that_is_no_longer_json() -> None:
    http = HttpSpec(
        method="POST",
        url="https://api.example.com/",
        headers={"Content-Type": "application/json"},
        body='{"q": {q}}',
    )
    with pytest.raises(HttpTemplateError, match="not valid JSON"):
        render_http_request(http, {"q": "1, 2"})


def test_render_plain_body_and_headers() -> None:
    http = HttpSpec(
        method="PUT", url="https://api.example.com/", headers={"X-Id": "id-{id}"}, body="v={id}"
    )
    rendered = render_http_request(http, {"id": "{q}"})
    assert rendered.headers == {"X-Id": "id-{q}"}  # one pass: values are not expanded again
    assert rendered.body == "v={q}"


@pytest.mark.parametrize("value", ["a\r\nX-Evil: 1", "a\nb", "a\0b"])
def test_render_refuses_header_injection(value: str) -> None:
    http = HttpSpec(url="https://api.example.com/", headers={"X-Id": "{id}"})
    with pytest.raises(HttpTemplateError, match="split the header"):
        render_http_request(http, {"id": value})


def test_render_names_a_missing_placeholder() -> None:
    http = HttpSpec(url="https://api.example.com/items/{id}")
    with pytest.raises(
        HttpTemplateError, match=r"placeholder \{id\} in the URL .*no argument 'id'"
    ):
        render_http_request(http, {})


@pytest.mark.parametrize("value", ["..", "."])
def test_render_refuses_dot_segments_in_the_url(value: str) -> None:
    http = HttpSpec(url="https://api.example.com/items/{id}/delete")
    with pytest.raises(HttpTemplateError, match="change the URL"):
        render_http_request(http, {"id": value})


def test_render_host_must_be_allowed() -> None:
    http = HttpSpec(url="https://{id}/", allowed_hosts=["a.example.com", "b.example.com:8443"])
    assert render_http_request(http, {"id": "a.example.com"}).url == "https://a.example.com/"
    with pytest.raises(HttpTemplateError, match="not an allowed host"):
        render_http_request(http, {"id": "b.example.com:8443"})  # ':' is encoded: no port
    with pytest.raises(HttpTemplateError, match="not an allowed host"):
        render_http_request(http, {"id": "evil.example.com"})
    with pytest.raises(HttpTemplateError, match="not an allowed host"):
        render_http_request(http, {"id": "a.example.com@evil.com"})


def test_render_with_explicit_ports() -> None:
    http = HttpSpec(url="https://{id}:8443/", allowed_hosts=["b.example.com:8443"])
    assert render_http_request(http, {"id": "b.example.com"}).url == "https://b.example.com:8443/"
    http = HttpSpec(url="https://a.example.com:9999/")
    assert render_http_request(http, {}).url == "https://a.example.com:9999/"
    http = HttpSpec(url="https://a.example.com:9999/", allowed_hosts=["a.example.com"])
    with pytest.raises(HttpTemplateError, match="not an allowed host"):
        render_http_request(http, {})


# --------------------------------------------------------------------------- form bodies


def _form(content_type: str = "application/x-www-form-urlencoded") -> HttpSpec:
    return HttpSpec(
        method="POST",
        url="https://api.example.com/transfer",
        headers={"Content-Type": content_type},
        body="a={a}&b=fixed",
    )


@pytest.mark.parametrize(
    "content_type",
    ["application/x-www-form-urlencoded", "Application/X-WWW-Form-Urlencoded; charset=utf-8"],
)
def test_a_form_body_encodes_each_value_so_no_field_can_be_added(content_type: str) -> None:
    rendered = render_http_request(_form(content_type), {"a": "1&b=evil&c=x+y %"})
    assert rendered.body == "a=1%26b%3Devil%26c%3Dx%2By+%25&b=fixed"
    fields = parse_qs(rendered.body or "")
    assert fields == {"a": ["1&b=evil&c=x+y %"], "b": ["fixed"]}


def test_a_form_body_writes_non_string_values_as_encoded_json() -> None:
    rendered = render_http_request(_form(), {"a": {"k": [1, 2]}})
    assert parse_qs(rendered.body or "") == {"a": ['{"k":[1,2]}'], "b": ["fixed"]}


def test_an_argument_cannot_choose_the_content_type_of_the_body() -> None:
    http = HttpSpec(
        method="POST",
        url="https://api.example.com/",
        headers={"Content-Type": "{ctype}"},
        body="a={a}",
    )
    with pytest.raises(HttpTemplateError, match="declare it literally"):
        render_http_request(http, {"ctype": "text/plain", "a": "1&b=2"})
    problems = check_descriptor(http_descriptor(http))
    assert any("Content-Type" in p and "literally" in p for p in problems), problems
