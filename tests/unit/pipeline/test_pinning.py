"""The lists an approval pins (`pipeline.pinning`) and what counts as their widening."""

from __future__ import annotations

from typing import Any

from tooladapter.model import ToolDescriptorSpec
from tooladapter.pipeline.pinning import egress_added, lists_of, widenings
from tooladapter.pipeline.policy import evaluate_policies

SCHEMA = {"type": "object", "properties": {"command": {"type": "string"}}}


def shell_tool(**spec: Any) -> ToolDescriptorSpec:
    return ToolDescriptorSpec.model_validate(
        {
            "toolId": "sh",
            "version": "1.0.0",
            "kind": "shell",
            "sideEffectClass": "sandbox",
            "inputSchema": SCHEMA,
            "sandbox": {"resources": {"limits": {"cpu": "1", "memory": "64Mi"}}},
            **spec,
        }
    )


def decision(allow: tuple[str, ...] = ("git status",), block: tuple[str, ...] = ("rm -rf",)) -> Any:
    return evaluate_policies(
        [],
        namespace="ns",
        tool_id="sh",
        tool_version="1.0.0",
        arguments={"command": "ls"},
        request_hash="sha256:x",
        default_shell_allow=allow,
        default_shell_block=block,
    )


def test_a_shell_tool_pins_its_default_lists_and_its_sandboxs_egress() -> None:
    lists = lists_of(shell_tool(), decision(), default_egress_allow=["github.com"])
    assert lists.shell_allow == ["git status"]
    assert lists.shell_block == ["rm -rf"]
    assert lists.egress_allow == ["github.com"]
    assert lists.digest.startswith("sha256:")


def test_the_digest_follows_the_lists() -> None:
    one = lists_of(shell_tool(), decision(), default_egress_allow=["github.com"])
    two = lists_of(shell_tool(), decision(), default_egress_allow=["github.com", "x.example"])
    assert one.digest != two.digest


def test_a_descriptors_own_lists_do_not_follow_the_defaults() -> None:
    tool = shell_tool(
        shell={"allow": ["echo"]}, sandbox={"resources": {}, "egress": {"allow": ["a.example"]}}
    )
    lists = lists_of(tool, decision(allow=("anything",)), default_egress_allow=["b.example"])
    assert lists.shell_allow == ["echo"] and lists.egress_allow == ["a.example"]


def test_widening_is_an_allow_entry_or_destination_added_or_a_block_pattern_removed() -> None:
    tool = shell_tool()
    approved = lists_of(tool, decision(), default_egress_allow=["github.com"])
    wider_egress = lists_of(tool, decision(), default_egress_allow=["github.com", "evil.example"])
    wider_allow = lists_of(
        tool, decision(allow=("git status", "sh")), default_egress_allow=["github.com"]
    )
    less_block = lists_of(tool, decision(block=()), default_egress_allow=["github.com"])
    assert widenings(approved, wider_egress) == ["egress allow list gained evil.example"]
    assert widenings(approved, wider_allow) == ["shell allow list gained 'sh'"]
    assert widenings(approved, less_block) == ["shell block list lost 'rm -rf'"]


def test_narrower_lists_are_no_widening() -> None:
    tool = shell_tool()
    approved = lists_of(
        tool,
        decision(allow=("git status", "git diff")),
        default_egress_allow=["github.com", "x.io"],
    )
    narrower = lists_of(
        tool, decision(block=("rm -rf", "shutdown")), default_egress_allow=["github.com"]
    )
    assert widenings(approved, narrower) == []


def test_a_block_pattern_respelled_is_the_same_pattern() -> None:
    tool = shell_tool()
    approved = lists_of(tool, decision(block=("rm -rf",)), default_egress_allow=[])
    now = lists_of(tool, decision(block=("RM  -rf",)), default_egress_allow=[])
    assert widenings(approved, now) == []


def test_a_destination_under_an_approved_wildcard_is_no_widening() -> None:
    assert egress_added(["api.example.com"], ["*.example.com"]) == []
    assert egress_added(["10.0.0.0/25"], ["10.0.0.0/24"]) == []
    assert egress_added(["example.org"], ["*.example.com"]) == ["example.org"]
