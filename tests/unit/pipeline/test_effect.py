"""The effect hash: calls that do the same to the world hash the same, however spelled."""

from __future__ import annotations

from typing import Any

from tests.unit.fake_cluster import NAMESPACE, descriptor
from tooladapter.model import ToolDescriptorSpec
from tooladapter.pipeline.effect import effect_hash


def spec(tool: str = "t", version: str = "1.0.0", **extra: Any) -> ToolDescriptorSpec:
    body = descriptor(tool, version=version, **extra)
    return ToolDescriptorSpec.model_validate(body["spec"])


PAY: dict[str, Any] = {
    "kind": "http",
    "side_effect_class": "spend",
    "http": {
        "method": "POST",
        "url": "https://pay.example/pay/{to}",
        "headers": {"Content-Type": "application/json"},
        "body": '{"amount": {amount}}',
    },
}


def of(descriptor_spec: ToolDescriptorSpec, arguments: dict[str, Any]) -> str:
    return effect_hash(namespace=NAMESPACE, descriptor=descriptor_spec, arguments=arguments)


def test_an_argument_the_http_tool_never_receives_does_not_change_the_effect() -> None:
    pay = spec("pay", **PAY)
    assert of(pay, {"to": "bob", "amount": 5}) == of(
        pay, {"to": "bob", "amount": 5, "memo": "retry"}
    )
    assert of(pay, {"to": "bob", "amount": 5}) != of(pay, {"to": "bob", "amount": 6})


def test_another_version_of_the_tool_has_the_same_effect() -> None:
    assert of(spec("pay", "1.0.0", **PAY), {"to": "bob", "amount": 5}) == of(
        spec("pay", "1.0.1", **PAY), {"to": "bob", "amount": 5}
    )


def test_shell_spellings_with_one_argv_have_one_effect() -> None:
    shell = spec("sh", kind="shell", side_effect_class="shared-write")
    same = {of(shell, {"command": c}) for c in ("sleep 60", "sleep  60", "'sleep' 60", " sleep 60")}
    assert len(same) == 1
    assert of(shell, {"command": "sleep 61"}) not in same


def test_another_tool_or_namespace_is_another_effect() -> None:
    pay = spec("pay", **PAY)
    arguments = {"to": "bob", "amount": 5}
    assert of(pay, arguments) != of(spec("pay2", **PAY), arguments)
    assert of(pay, arguments) != effect_hash(
        namespace="elsewhere", descriptor=pay, arguments=arguments
    )


def test_a_template_that_does_not_render_falls_back_to_the_arguments() -> None:
    pay = spec("pay", **PAY)
    assert of(pay, {"to": "..", "amount": 5}) != of(pay, {"to": "..", "amount": 6})
