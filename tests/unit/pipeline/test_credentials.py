"""`spec.credentials` against the tool's kind, sandbox and egress
(`pipeline.validation.credentials`): each problem named with its entry's index."""

from __future__ import annotations

from typing import Any

import pytest

from tooladapter.enums import SideEffectClass, ToolKind, WorkspaceMode
from tooladapter.model import (
    Credential,
    Egress,
    HttpSpec,
    McpBinding,
    McpServerSpec,
    NativeSpec,
    SandboxSpec,
    ToolDescriptorSpec,
)
from tooladapter.pipeline.validation.credentials import (
    check_credentials,
    check_server_credentials,
    egress_of,
    internal_literal,
)
from tooladapter.pipeline.validation.descriptor import check_descriptor

SECRET = {"secretKeyRef": {"name": "api", "key": "token"}}
TOKEN = {"serviceAccountToken": {"serviceAccountName": "deployer"}}


def cred(name: str = "api", source: dict[str, Any] | None = None, **inject: Any) -> Credential:
    return Credential.model_validate(
        {
            "name": name,
            "source": source or SECRET,
            "inject": inject or {"hosts": ["api.example.com"]},
        }
    )


def file(
    name: str = "api", path: str | None = None, source: dict[str, Any] | None = None
) -> Credential:
    return cred(name, source, file=path or f"/tooladapter/credentials/{name}")


def sandboxed(
    kind: ToolKind = ToolKind.SHELL,
    allow: list[str] | None = None,
    *credentials: Credential,
    workspace: WorkspaceMode = WorkspaceMode.CALL,
) -> ToolDescriptorSpec:
    sandbox = SandboxSpec(
        command=["/bin/tool"] if kind is ToolKind.CONTAINER else [],
        egress=Egress(allow=allow),
        workspace=workspace,
    )
    return ToolDescriptorSpec(
        tool_id="t",
        version="1.0.0",
        kind=kind,
        side_effect_class=SideEffectClass.SANDBOX,
        sandbox=sandbox,
        credentials=list(credentials),
    )


def http_tool(allowed: list[str], *credentials: Credential) -> ToolDescriptorSpec:
    return ToolDescriptorSpec(
        tool_id="t",
        version="1.0.0",
        kind=ToolKind.HTTP,
        side_effect_class=SideEffectClass.READ,
        http=HttpSpec(url="https://api.example.com/v1", allowed_hosts=allowed),
        credentials=list(credentials),
    )


def test_no_credentials_no_problems() -> None:
    assert check_credentials(sandboxed()) == []


def test_well_formed_declarations_have_no_problems() -> None:
    assert check_credentials(http_tool(["api.example.com"], cred())) == []
    assert (
        check_credentials(sandboxed(ToolKind.SHELL, ["api.example.com"], cred(source=TOKEN))) == []
    )
    container = sandboxed(ToolKind.CONTAINER, [], file("a"), file("b", source=TOKEN))
    assert check_credentials(container) == []
    assert check_descriptor(container) == []


def test_a_host_the_egress_does_not_allow_is_named_with_its_index() -> None:
    spec = http_tool(
        ["api.example.com"],
        cred("a"),
        cred("b", hosts=["api.example.com", "other.example.com"]),
    )
    assert check_credentials(spec) == [
        "credentials[1].inject.hosts: 'other.example.com' is not allowed by the tool's egress "
        "(api.example.com)"
    ]


@pytest.mark.parametrize(
    ("hosts", "allow", "bad"),
    [
        (["*.example.com"], ["api.example.com"], "*.example.com"),  # wildcard only below one
        (["example.com"], ["*.example.com"], "example.com"),
        (["api.example.com:8443"], ["api.example.com"], "api.example.com:8443"),  # ports exact
        (["api.example.com"], ["api.example.com:8443"], "api.example.com"),
        (["api.example.com"], ["10.0.0.0/8"], "api.example.com"),
    ],
)
def test_sandbox_egress_must_cover_each_host(hosts: list[str], allow: list[str], bad: str) -> None:
    problems = check_credentials(sandboxed(ToolKind.SHELL, allow, cred(hosts=hosts)))
    assert problems == [
        f"credentials[0].inject.hosts: {bad!r} is not allowed by the tool's egress "
        f"({', '.join(allow)})"
    ]


def test_a_wildcard_below_a_wildcard_is_covered() -> None:
    spec = sandboxed(
        ToolKind.SHELL, ["*.example.com"], cred(hosts=["*.api.example.com", "a.example.com"])
    )
    assert check_credentials(spec) == []


def test_credentials_need_an_explicit_egress() -> None:
    needle = "credentials: a tool that declares credentials must set its egress explicitly"
    shell = sandboxed(ToolKind.SHELL, None, cred())
    assert egress_of(shell) is None
    assert any(p.startswith(needle) for p in check_credentials(shell))
    http = http_tool([], cred())
    assert egress_of(http) is None
    assert any(p.startswith(needle) for p in check_credentials(http))
    # `[]` is explicit (no egress at all): a file needs none.
    assert check_credentials(sandboxed(ToolKind.CONTAINER, [], file())) == []


def test_a_file_on_a_shell_tool_is_refused() -> None:
    problems = check_credentials(
        sandboxed(ToolKind.SHELL, ["api.example.com"], cred("a"), file("b"))
    )
    assert problems == [
        "credentials[1].inject.file: only a container tool (a fixed sandbox.command) takes a "
        "credential file, not a shell tool"
    ]


def test_a_file_on_an_http_tool_is_refused() -> None:
    problems = check_credentials(http_tool(["api.example.com"], file()))
    assert problems == [
        "credentials[0].inject.file: only a container tool (a fixed sandbox.command) takes a "
        "credential file, not a http tool"
    ]


def test_a_file_with_an_attempt_workspace_is_refused() -> None:
    spec = sandboxed(ToolKind.CONTAINER, [], file(), workspace=WorkspaceMode.ATTEMPT)
    assert check_credentials(spec) == [
        "credentials[0].inject.file: not with sandbox.workspace attempt: a workspace outlives "
        "its calls"
    ]
    # HTTP injection happens at the proxy, outside the workspace pod: allowed.
    injected = sandboxed(
        ToolKind.SHELL, ["api.example.com"], cred(), workspace=WorkspaceMode.ATTEMPT
    )
    assert check_credentials(injected) == []


def test_duplicate_names_and_files_are_named() -> None:
    spec = sandboxed(
        ToolKind.CONTAINER,
        [],
        file("a", "/tooladapter/credentials/x"),
        file("b", "/tooladapter/credentials/x"),
        file("a", "/tooladapter/credentials/y"),
    )
    assert check_credentials(spec) == [
        "credentials[1].inject.file: /tooladapter/credentials/x is used twice",
        "credentials[2].name: 'a' is declared twice",
    ]


def test_native_and_mcp_tools_take_none() -> None:
    native = ToolDescriptorSpec(
        tool_id="t",
        version="1.0.0",
        kind=ToolKind.NATIVE,
        side_effect_class=SideEffectClass.READ,
        native=NativeSpec(name="list-tools"),
        credentials=[cred()],
    )
    mcp = native.model_copy(
        update={
            "kind": ToolKind.MCP,
            "native": None,
            "mcp": McpBinding(server="s", tool="t", pinned_digest="sha256:" + "0" * 64),
        }
    )
    for spec in (native, mcp):
        (problem,) = check_credentials(spec)
        assert problem.startswith("credentials: native tools take none")
        assert "McpServer" in problem
        assert problem in check_descriptor(spec)


def test_source_names_are_checked() -> None:
    spec = sandboxed(
        ToolKind.CONTAINER,
        [],
        file("a", source={"secretKeyRef": {"name": "Bad_Name", "key": "k/ey"}}),
        file("b", source={"serviceAccountToken": {"serviceAccountName": "-x"}}),
    )
    problems = check_credentials(spec)
    assert problems == [
        "credentials[0].source.secretKeyRef.name: 'Bad_Name' is not a Secret name",
        "credentials[0].source.secretKeyRef.key: 'k/ey' is not a Secret key",
        "credentials[1].source.serviceAccountToken.serviceAccountName: '-x' is not a "
        "ServiceAccount name",
    ]


# --------------------------------------------------------------------------- servers


def server(url: str, *credentials: Credential) -> McpServerSpec:
    return McpServerSpec(url=url, credentials=list(credentials))


def test_a_server_credential_names_the_servers_host() -> None:
    assert (
        check_server_credentials(
            server("https://mcp.example.com/mcp", cred(hosts=["mcp.example.com"]))
        )
        == []
    )
    assert (
        check_server_credentials(
            server("http://mcp.example.com:8080/mcp", cred(hosts=["mcp.example.com:8080"]))
        )
        == []
    )
    assert (
        check_server_credentials(server("http://10.0.0.5:8080/mcp", cred(hosts=["10.0.0.5:8080"])))
        == []
    )
    assert check_server_credentials(
        server(
            "https://mcp.example.com/mcp",
            cred(hosts=["a.example.com"]),
            cred("b", hosts=["mcp.example.com"]),
        )
    ) == ["credentials[0].inject.hosts: 'a.example.com' is not the server's host (mcp.example.com)"]


def test_a_server_credential_takes_no_file_methods_or_paths() -> None:
    for credential in (
        file(),
        cred(hosts=["mcp.example.com"], methods=["POST"]),
        cred(hosts=["mcp.example.com"], paths=["/mcp"]),
    ):
        problems = check_server_credentials(server("https://mcp.example.com/mcp", credential))
        assert (
            "credentials[0].inject: a server's credential takes no file, methods or paths"
            in problems
        )


def test_a_server_credentials_sources_are_checked() -> None:
    bad = cred(
        source={"secretKeyRef": {"name": "Nope!", "key": "token"}}, hosts=["mcp.example.com"]
    )
    assert check_server_credentials(server("https://mcp.example.com/mcp", bad)) == [
        "credentials[0].source.secretKeyRef.name: 'Nope!' is not a Secret name"
    ]


@pytest.mark.parametrize(
    "url",
    [
        "https://10.1.2.3/token",
        "https://127.0.0.1:8443/token",
        "https://169.254.169.254/latest",
        "https://[::1]/token",
        "https://[fd00::1]/token",
        "https://192.168.1.1/token",
        "https://localhost/token",
        "https://issuer.localhost/token",
        "https://100.64.0.1/token",
    ],
)
def test_an_issuer_url_naming_an_internal_address_literally_is_refused(url: str) -> None:
    assert internal_literal(url) is not None


@pytest.mark.parametrize(
    "url",
    ["https://issuer.example.com/token", "https://8.8.8.8/token", "https://[2001:4860::8888]/t"],
)
def test_a_public_or_named_issuer_url_passes(url: str) -> None:
    assert internal_literal(url) is None
