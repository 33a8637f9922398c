"""The sandbox's Kubernetes objects, built as plain data: every security property of a
lease is checked here without a cluster."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tooladapter.model import Credential, ResourceQuantities, Resources, SandboxSpec
from tooladapter.naming import ANNOTATION_ARGUMENTS, LeaseNames
from tooladapter.sandbox.job import (
    build_job,
    build_network_policy,
    build_secret,
    network_gate_for,
    split_egress,
)
from tooladapter.sandbox.podspec import (
    GATE_ATTEMPTS,
    GATE_CONTAINER_NAME,
    GATE_EXEC,
    GATE_SCRIPT,
)
from tooladapter.settings import Settings

UID = "0b7c6a52-6a3e-4a3b-9f0e-1c2d3e4f5a6b"
OWNER = {
    "apiVersion": "tooladapter.dev/v1alpha1",
    "kind": "ToolInvocation",
    "name": "c",
    "uid": UID,
    "controller": True,
    "blockOwnerDeletion": False,
}


def job(**overrides: object) -> dict[str, Any]:
    args: dict[str, Any] = {
        "namespace": "team-a",
        "uid": UID,
        "invocation_name": "c",
        "owner": OWNER,
        "sandbox": SandboxSpec(
            resources=Resources(
                requests=ResourceQuantities(cpu="50m", memory="32Mi"),
                limits=ResourceQuantities(cpu="500m", memory="64Mi"),
            )
        ),
        "image": "localhost/tooladapter-sandbox:dev",
        "argv": ["echo", "a; rm -rf /"],
        "arguments": {"command": "echo 'a; rm -rf /'"},
        "timeout_seconds": 42,
        "lease_id": UID,
    }
    args.update(overrides)
    return build_job(**args)


def test_the_job_never_retries_and_fails_whole_on_any_error_or_disruption() -> None:
    spec = job()["spec"]
    assert spec["backoffLimit"] == 0 and spec["podReplacementPolicy"] == "Failed"
    assert spec["activeDeadlineSeconds"] == 42
    rules = spec["podFailurePolicy"]["rules"]
    assert {"type": "DisruptionTarget"} in rules[0]["onPodConditions"]
    assert rules[1]["onExitCodes"] == {"containerName": "tool", "operator": "NotIn", "values": [0]}


def test_the_pod_is_locked_down_and_runs_argv_without_a_shell() -> None:
    pod = job()["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is False and pod["enableServiceLinks"] is False
    assert pod["restartPolicy"] == "Never"
    container = pod["containers"][0]
    assert container["command"] == ["echo", "a; rm -rf /"]
    sc = container["securityContext"]
    assert sc["runAsNonRoot"] and sc["readOnlyRootFilesystem"]
    assert sc["allowPrivilegeEscalation"] is False and sc["capabilities"] == {"drop": ["ALL"]}
    assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
    assert container["resources"]["limits"] == {"cpu": "500m", "memory": "64Mi"}
    workspace = next(v for v in pod["volumes"] if v["name"] == "workspace")
    assert workspace["emptyDir"] == {"sizeLimit": "64Mi"}


def test_arguments_reach_the_pod_as_a_file_of_exact_json() -> None:
    template = job()["spec"]["template"]
    assert json.loads(template["metadata"]["annotations"][ANNOTATION_ARGUMENTS]) == {
        "command": "echo 'a; rm -rf /'"
    }
    volume = next(v for v in template["spec"]["volumes"] if v["name"] == "tooladapter")
    assert volume["downwardAPI"]["items"][0]["path"] == "arguments.json"


def file_credential(name: str, path: str) -> Credential:
    return Credential.model_validate(
        {
            "name": name,
            "source": {"secretKeyRef": {"name": "db", "key": "password"}},
            "inject": {"file": path},
        }
    )


def test_only_credential_files_are_mounted_from_the_ephemeral_secret() -> None:
    files = [file_credential("db", "/tooladapter/credentials/db/password")]
    pod = job(credential_files=files)["spec"]["template"]["spec"]
    volume = next(v for v in pod["volumes"] if v["name"] == "credentials")
    assert volume["secret"]["secretName"] == LeaseNames.for_uid(UID).secret
    assert volume["secret"]["items"] == [{"key": "file-db", "path": "db/password"}]
    (tool,) = pod["containers"]
    mount = next(m for m in tool["volumeMounts"] if m["name"] == "credentials")
    assert mount == {
        "name": "credentials",
        "mountPath": "/tooladapter/credentials",
        "readOnly": True,
    }
    secret = build_secret(namespace="team-a", uid=UID, owner=OWNER, data_b64={"file-db": "eA=="})
    assert secret["metadata"]["ownerReferences"] == [OWNER] and secret["data"] == {
        "file-db": "eA=="
    }


def test_each_file_credential_is_its_own_key_at_its_own_path() -> None:
    files = [
        file_credential("db", "/tooladapter/credentials/db"),
        file_credential("kube", "/tooladapter/credentials/kube/.token"),
    ]
    pod = job(credential_files=files)["spec"]["template"]["spec"]
    volume = next(v for v in pod["volumes"] if v["name"] == "credentials")
    assert volume["secret"]["items"] == [
        {"key": "file-db", "path": "db"},
        {"key": "file-kube", "path": "kube/.token"},
    ]


def test_without_credential_files_nothing_is_mounted_from_a_secret() -> None:
    nothing: list[list[Credential] | None] = [None, []]
    for files in nothing:
        pod = job(credential_files=files)["spec"]["template"]["spec"]
        assert not any(v["name"] == "credentials" or "secret" in v for v in pod["volumes"])
        (tool,) = pod["containers"]
        assert not any(m["name"] == "credentials" for m in tool["volumeMounts"])


def test_the_network_policy_denies_everything_but_allow_listed_cidrs() -> None:
    policy = build_network_policy(
        namespace="team-a", uid=UID, owner=OWNER, egress_allow=["10.1.0.0/16", "github.com"]
    )
    spec = policy["spec"]
    assert spec["policyTypes"] == ["Ingress", "Egress"] and spec["ingress"] == []
    assert spec["egress"] == [{"to": [{"ipBlock": {"cidr": "10.1.0.0/16"}}]}]
    assert (
        build_network_policy(namespace="n", uid=UID, owner=OWNER, egress_allow=[])["spec"]["egress"]
        == []
    )
    assert split_egress(["10.0.0.1/32", "github.com"]) == (["10.0.0.1/32"], ["github.com"])


def test_the_network_gate_waits_for_enforcement_whatever_the_allow_list() -> None:
    canary = ("192.0.2.2", 4242)
    assert network_gate_for(canary, ["10.0.0.0/8"]) == canary
    # An allowed CIDR covering the canary is let out on every port but the canary's.
    assert network_gate_for(canary, ["192.0.2.0/24"]) == canary
    policy = build_network_policy(
        namespace="n",
        uid=UID,
        owner=OWNER,
        egress_allow=["10.0.0.0/8", "192.0.2.0/24"],
        canary=canary,
    )
    plain, covering = policy["spec"]["egress"]
    assert plain == {"to": [{"ipBlock": {"cidr": "10.0.0.0/8"}}]}
    assert covering["to"] == [{"ipBlock": {"cidr": "192.0.2.0/24"}}]
    assert covering["ports"] == [
        {"protocol": "TCP", "port": 1, "endPort": 4241},
        {"protocol": "TCP", "port": 4243, "endPort": 65535},
        {"protocol": "UDP"},
        {"protocol": "SCTP"},
    ]
    assert network_gate_for(None, []) is None
    # A tool of its own image: the gate is an init container of the gate's image.
    init = job(network_gate=canary, gate_image="gate-img")["spec"]["template"]["spec"][
        "initContainers"
    ][0]
    assert init["name"] == GATE_CONTAINER_NAME
    # Host and port are positional parameters of a fixed script, never spliced into it.
    assert init["command"][:2] == ["/bin/sh", "-c"] and init["command"][4:6] == [
        "192.0.2.2",
        "4242",
    ]
    assert "192.0.2.2" not in init["command"][2]
    assert init["image"] == "gate-img"
    assert "initContainers" not in job()["spec"]["template"]["spec"]


def test_a_tool_of_the_gates_image_is_gated_in_its_own_container_before_its_argv() -> None:
    canary = ("192.0.2.2", 4242)
    image = "localhost/tooladapter-sandbox:dev"
    pod = job(network_gate=canary, gate_image=image)["spec"]["template"]["spec"]
    assert "initContainers" not in pod
    (tool,) = pod["containers"]
    # The gate's script, its host, port and attempts as parameters, then the argv whole.
    assert tool["command"] == [
        "/bin/sh",
        "-c",
        GATE_EXEC,
        "gate",
        "192.0.2.2",
        "4242",
        str(GATE_ATTEMPTS),
        "echo",
        "a; rm -rf /",
    ]
    assert GATE_EXEC.startswith(GATE_SCRIPT) and GATE_EXEC.endswith('shift 3; exec "$@"')
    # The podFailurePolicy still names the tool's container: a failed gate fails the Job.
    assert (
        job(network_gate=canary)["spec"]["podFailurePolicy"]["rules"][1]["onExitCodes"][
            "containerName"
        ]
        == tool["name"]
    )
    # No argv (the image's own entrypoint): the shell could not exec it, so an init container.
    bare = job(network_gate=canary, gate_image=image, argv=[])["spec"]["template"]["spec"]
    assert [c["name"] for c in bare["initContainers"]] == [GATE_CONTAINER_NAME]
    assert bare["containers"][0]["command"] == []


def test_the_runtime_class_comes_from_the_descriptor_or_the_kind_mapping() -> None:
    from tooladapter.enums import SandboxKind
    from tooladapter.sandbox.job import runtime_class_for

    mapping = {"GVisor": "gvisor", "Kata": "kata"}
    assert runtime_class_for(SandboxSpec(), mapping) is None  # Container: the node default
    assert runtime_class_for(SandboxSpec(kind=SandboxKind.GVISOR), mapping) == "gvisor"
    assert runtime_class_for(SandboxSpec(kind=SandboxKind.KATA), {}) is None
    named = SandboxSpec(kind=SandboxKind.GVISOR, runtime_class_name="runsc-debug")
    assert runtime_class_for(named, mapping) == "runsc-debug"


def test_registry_images_are_pulled_with_the_named_pull_secrets_and_policy() -> None:
    """Images from a registry (issue 32): the pull policy applies to the tool and the gate,
    and the pod names the configured pull Secrets (the tenant's own; never copied)."""
    pod = job(
        image="registry.example:5000/tooladapter-sandbox:0.1.0",
        image_pull_policy="Always",
        image_pull_secrets=["regcred", "mirror"],
        network_gate=("10.0.0.5", 8181),
        gate_image="registry.example:5000/gate:0.1.0",
    )["spec"]["template"]["spec"]
    assert pod["imagePullSecrets"] == [{"name": "regcred"}, {"name": "mirror"}]
    for c in [*pod["initContainers"], *pod["containers"]]:
        assert c["imagePullPolicy"] == "Always"
    assert "imagePullSecrets" not in job()["spec"]["template"]["spec"]


def test_pull_secret_names_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOOLADAPTER_IMAGE_PULL_SECRETS", "regcred, mirror,")
    assert Settings.from_env().sandbox.image_pull_secrets == ("regcred", "mirror")
    monkeypatch.delenv("TOOLADAPTER_IMAGE_PULL_SECRETS")
    assert Settings.from_env().sandbox.image_pull_secrets == ()
